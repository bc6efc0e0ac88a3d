"""A worker's housekeeping is what its builder hands it: the stuck-work scan always, and the
periodic tasks given (reconciliation, in ``ledgerflow worker --reconcile-seconds``).

The worker itself wires none of them, so the runtime does not depend on the operators' layer
(tests/test_layers.py holds the rule).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import ledgerflow as lf
from conditions import until
from ledgerflow.runtime.periodic import PeriodicTask


def test_the_builder_hands_the_worker_its_periodic_tasks(tmp_path: Path) -> None:
    """Goal: ``engine.worker(periodic=...)`` runs the scan and the given tasks, nothing else.

    Method: build a worker with one extra task of a short interval; its periodic names are
    the scan, that task and its heartbeat in the worker registry; run the worker until the
    task has run twice (bounded wait), then stop it.
    """
    ran: list[int] = []

    async def tick() -> None:
        ran.append(len(ran))

    async def main() -> None:
        async with lf.Engine(f"sqlite:///{tmp_path / 'journal.db'}", lf.Registry()) as engine:
            task = PeriodicTask(name="tick", interval_seconds=0.05, run=tick)
            worker = engine.worker(poll_seconds=0.01, periodic=[task])
            assert worker.periodic.names == ["detection", "tick", "unserved", "worker-heartbeat"]
            running = asyncio.create_task(worker.run())
            await until(lambda: worker.periodic.runs("tick") >= 2, what="the task ran twice")
            worker.stop()
            await running
        assert len(ran) >= 2

    asyncio.run(main())
