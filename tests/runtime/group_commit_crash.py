"""A worker process for the group-commit crash test: many instances at once, each step noted.

Run as ``python group_commit_crash.py DB_URL INSTANCES CONCURRENCY`` with ``LEDGERFLOW_FAULTS``
set, it starts ``INSTANCES`` instances of ``noted`` at once in one engine with an in-process
worker that drives ``CONCURRENCY`` of them at a time (many: their commits share group
transactions; one: each commit is alone, applied on the loop's thread on SQLite) until a fault
kills it. The
workflow appends a line to the side file ``$GROUP_COMMIT_NOTES`` only after ``ctx.step``
returned: every line is a step this process acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import ledgerflow as lf
from ledgerflow.runtime import faults

NOTES_VARIABLE = "GROUP_COMMIT_NOTES"
STEPS = 3
# Short, so that a fresh worker takes over the dead one's instances quickly.
LEASE_SECONDS = 1.0
RESULT_TIMEOUT_SECONDS = 60.0

registry = lf.Registry()


def token() -> str:
    # Different on every execution: a step run again after a lost result shows as a mismatch.
    return uuid.uuid4().hex


def note(line: str) -> None:
    with open(os.environ[NOTES_VARIABLE], "a", encoding="utf-8") as notes:
        notes.write(line + "\n")


@registry.workflow(name="noted", version=1)
async def noted(ctx: lf.WorkflowContext, n: int) -> int:
    for seq in range(1, STEPS + 1):
        # A checkpoint: each step's own commit is what the kill lands in (a step's result
        # otherwise rides the next commit, and ctx.step returns before it is durable).
        value = await ctx.step(f"step{seq}", token, checkpoint=True)
        note(f"{ctx.instance_id} {seq} {value}")
    return n


async def main(url: str, instances: int, concurrency: int) -> None:
    faults.install_from_environment()
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(concurrency=concurrency, lease_seconds=LEASE_SECONDS)
        running = asyncio.create_task(worker.run())
        started = await asyncio.gather(
            *(engine.start(noted, key=f"k{i}", input=i) for i in range(instances))
        )
        await asyncio.gather(
            *(engine.result(s.instance_id, timeout=RESULT_TIMEOUT_SECONDS) for s in started)
        )
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
