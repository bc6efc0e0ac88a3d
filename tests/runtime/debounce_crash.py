"""A process for the debounced-start kill test: it starts ``reindex`` under ``KEY`` with a
debounce (input 1), installs the fault plan from ``LEDGERFLOW_FAULTS`` (as ``ledgerflow
worker`` does), and makes the key's second debounced start (input 2) while its own worker
runs, to be killed by SIGKILL around that start's commit.

Run as ``python debounce_crash.py DB_URL KEY``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import ledgerflow as lf
from ledgerflow.runtime import faults

# Long enough that nothing is due while the process lives: the test's recovery runs it.
WINDOW = {"debounce_seconds": 30.0, "debounce_max_seconds": 60.0}

registry = lf.Registry()


@registry.workflow(name="reindex", version=1)
async def reindex(ctx: lf.WorkflowContext, value: Any) -> Any:
    return await ctx.step("received", lambda: value)


async def main(url: str, key: str) -> None:
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(lease_seconds=1.0, poll_seconds=0.01)
        running = asyncio.create_task(worker.run())
        await engine.start(reindex, key=key, input=1, **WINDOW)  # type: ignore[arg-type]
        faults.install_from_environment()
        await engine.start(reindex, key=key, input=2, **WINDOW)  # type: ignore[arg-type]
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
