"""A store that stalls for longer than the lease while a step runs: one worker never runs two
copies of one instance.

The fault is real: another connection holds the journal (SQLite's write lock from a second
connection, PostgreSQL's table lock) for four lease lengths while a local step of the instance
is running, so the worker's renewals and claims wait on the database. The step counts how many
copies of it run at once, and the event loop's exception handler records anything that escapes
the worker's callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

import ledgerflow as lf
from conditions import until

LEASE_SECONDS = 0.5
# The fault: the journal is held this long, four lease lengths, while the step runs.
STALL_SECONDS = 2.0


class Step:
    """A local step that waits for its gate and counts its copies running at once."""

    def __init__(self) -> None:
        self.runs = 0
        self.running = 0
        self.most = 0
        self.gate = asyncio.Event()

    async def __call__(self) -> str:
        self.runs += 1
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        return "done"


def _registry(step: Step) -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="slow", version=1)
    async def slow(ctx: lf.WorkflowContext, _: None) -> str:
        value: str = await ctx.step("slow", step)
        return value

    return registry


@contextlib.contextmanager
def _journal_held(url: str) -> Iterator[None]:
    """Another connection takes the journal's write lock (SQLite) or locks the instances table
    (PostgreSQL) and holds it until the block ends."""
    if url.startswith("sqlite:///"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            db.execute("ROLLBACK")
            db.close()
        return
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base) as db:
        db.execute(f"LOCK TABLE {schema}.lf_instances IN ACCESS EXCLUSIVE MODE")
        yield
        db.rollback()


def _hold_the_journal(url: str, taken: threading.Event) -> None:
    with _journal_held(url):
        taken.set()
        threading.Event().wait(STALL_SECONDS)  # The stall itself: the fault's length.


def test_a_stall_past_the_lease_never_runs_a_second_copy(journal_url: str) -> None:
    """Goal: a worker whose lease lapsed during a store stall never runs the instance twice at
    once, and nothing escapes its callbacks.

    Method: a worker (lease 0.5 s) runs a local step that waits on a gate; another connection
    holds the journal for 2 s. Once the step has started a second time (the worker stopped the
    copy whose lease it could not renew and took the instance up again after the stall), the
    gate opens. At most one copy of the step ran at any moment, the instance SUCCEEDED, and the
    loop's exception handler saw nothing.
    """
    step = Step()
    escaped: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: escaped.append(ctx))
        async with lf.Engine(journal_url, _registry(step)) as engine:
            worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.02)
            running = asyncio.create_task(worker.run())
            started = await engine.start("slow", key="k-1")
            await until(lambda: step.runs >= 1, what="the step to start")
            taken = threading.Event()
            holder = asyncio.create_task(asyncio.to_thread(_hold_the_journal, journal_url, taken))
            await asyncio.to_thread(taken.wait, 10)
            await holder
            await until(lambda: step.runs >= 2, what="the step to run again after the stall")
            step.gate.set()
            assert await engine.result(started.instance_id, timeout=30) == "done"
            worker.stop()
            await running

    asyncio.run(main())
    assert step.most == 1, f"{step.most} copies of the step ran at once"
    assert escaped == []


def test_stalls_of_its_own_store_never_park_a_healthy_instance(journal_url: str) -> None:
    """Goal: a lease lost because the worker's own store stalled is not a crash of the
    instance: three stalls during one long step (each past the lease, each followed by the
    worker taking its instance back) leave it unparked, counted apart from crash-loop lapses.

    Method: as above, three stalls one after another (the crash-loop bound is 3 lapses); after
    each the step starts again. Then the gate opens: the instance SUCCEEDED, its lapse count
    is 0, three leases were lost to the store and three taken back, and none counted as a
    takeover of a dead owner.
    """
    step = Step()
    metrics = lf.Metrics(registry=CollectorRegistry())

    async def main() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, _registry(step), metrics=metrics) as engine:
            worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.02)
            running = asyncio.create_task(worker.run())
            started = await engine.start("slow", key="k-3")
            for stall in range(1, 4):
                await until(lambda s=stall: step.runs >= s, what=f"run {stall} of the step")
                taken = threading.Event()
                holder = asyncio.create_task(
                    asyncio.to_thread(_hold_the_journal, journal_url, taken)
                )
                await asyncio.to_thread(taken.wait, 10)
                await holder
            await until(lambda: step.runs >= 4, what="the step to run after the third stall")
            step.gate.set()
            assert await engine.result(started.instance_id, timeout=30) == "done"
            record = await engine.get(started.instance_id)
            worker.stop()
            await running
            return record

    record = asyncio.run(main())
    assert (record.status, record.lease_expiries) == (lf.InstanceStatus.SUCCEEDED, 0)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
    }
    assert samples[("ledgerflow_leases_lost_total", (("reason", "store"),))] == 3
    assert samples[("ledgerflow_leases_retaken_total", ())] == 3
    assert not any(
        name == "ledgerflow_lease_takeovers_total" and v for (name, _), v in samples.items()
    )
