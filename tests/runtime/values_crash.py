"""A worker process for the published-values kill test: a workflow that publishes, runs a
step, publishes again and ends, killed by SIGKILL at a named point.

Run as ``python values_crash.py DB_URL KEY`` with ``LEDGERFLOW_FAULTS`` set: it installs the
fault plan (as ``ledgerflow worker`` does), starts ``stages`` under ``KEY`` and drives it until
its result, or until a fault kills it.
"""

from __future__ import annotations

import asyncio
import sys

import ledgerflow as lf
from ledgerflow.runtime import faults

# Short, so that a fresh worker takes over the dead one's instance quickly.
LEASE_SECONDS = 0.5
RESULT_TIMEOUT_SECONDS = 60.0

registry = lf.Registry()


def _double(n: int) -> int:
    return 2 * n


@registry.workflow(name="stages", version=1)
async def stages(ctx: lf.WorkflowContext, n: int) -> int:
    ctx.publish("stage", "started")
    doubled = int(await ctx.step("double", _double, n, checkpoint=True))
    ctx.publish("stage", {"doubled": doubled})
    return doubled


async def main(url: str, key: str) -> None:
    faults.install_from_environment()
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.01)
        running = asyncio.create_task(worker.run())
        started = await engine.start(stages, key=key, input=21)
        await engine.result(started.instance_id, timeout=RESULT_TIMEOUT_SECONDS)
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
