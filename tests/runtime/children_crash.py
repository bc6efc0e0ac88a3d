"""A worker process for the child-protocol kill test: a parent that starts a child and takes
its result, killed by SIGKILL at a named point of the protocol.

Run as ``python children_crash.py DB_URL KEY`` with ``LEDGERFLOW_FAULTS`` set: it installs
the fault plan (as ``ledgerflow worker`` does), starts ``parent`` under ``KEY`` and drives it
(and its child) until the parent's result, or until a fault kills it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import ledgerflow as lf
from ledgerflow.runtime import faults

# Short, so that a fresh worker takes over the dead one's instances quickly.
LEASE_SECONDS = 0.5
RESULT_TIMEOUT_SECONDS = 60.0

registry = lf.Registry()


@registry.workflow(name="kid", version=1)
async def kid(ctx: lf.WorkflowContext, n: int) -> dict[str, Any]:
    doubled = await ctx.step("double", lambda x: 2 * x, n)
    return {"doubled": doubled}


@registry.workflow(name="parent", version=1)
async def parent(ctx: lf.WorkflowContext, n: int) -> dict[str, Any]:
    got = await ctx.child(kid, n)
    total = await ctx.step("total", lambda x: x + 1, got["doubled"])
    return {"total": total}


async def main(url: str, key: str) -> None:
    faults.install_from_environment()
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.01)
        running = asyncio.create_task(worker.run())
        started = await engine.start(parent, key=key, input=20)
        await engine.result(started.instance_id, timeout=RESULT_TIMEOUT_SECONDS)
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
