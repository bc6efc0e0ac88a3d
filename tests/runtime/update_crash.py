"""A worker process for the update-handler kill test: a workflow waiting for "go" with a
declared handler for "add" (it runs a step), killed by SIGKILL at a named point while it
answers an update stored before it ran.

Run as ``python update_crash.py DB_URL KEY`` with ``LEDGERFLOW_FAULTS`` set: it installs the
fault plan (as ``ledgerflow worker`` does), starts ``tally`` under ``KEY``, asks the update
``u-1`` and drives the instance until a fault kills it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import ledgerflow as lf
from ledgerflow.runtime import faults

# Short, so that a fresh worker takes over the dead one's instance quickly.
LEASE_SECONDS = 0.5
REPLY_TIMEOUT_SECONDS = 60.0

registry = lf.Registry()


def _double(n: int) -> int:
    return 2 * n


@registry.workflow(name="tally", version=1)
async def tally(ctx: lf.WorkflowContext, start: int) -> int:
    totals = [start]

    async def add(amount: int) -> int:
        totals.append(await ctx.step("double", _double, amount))
        return sum(totals)

    ctx.on_update("add", add)
    await ctx.wait_for("go")
    return sum(totals)


async def main(url: str, key: str) -> Any:
    faults.install_from_environment()
    async with lf.Engine(url, registry) as engine:
        started = await engine.start(tally, key=key, input=1)
        asking = asyncio.create_task(
            engine.update(str(started.instance_id), "add", 5, update_id="u-1", timeout=60)
        )
        worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.01)
        running = asyncio.create_task(worker.run())
        await asking
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
