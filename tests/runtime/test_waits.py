"""Durable sleeps and waits: timers, signals, approvals, deduplication, late events, races.

Each test runs on a real SQLite file with a fake clock, so a timer of an hour costs nothing: a
worker runs until nothing is due, the clock moves, and a worker runs again. Deliveries come
through a second engine (another connection), as from another process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import WaitTimeoutError
from ledgerflow.ledger.transaction import Deliver
from ledgerflow.testing import FakeClock


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="nap", version=1)
    async def nap(ctx: lf.WorkflowContext, seconds: float) -> str:
        await ctx.sleep(seconds)
        return "rested"

    @registry.workflow(name="two", version=1)
    async def two(ctx: lf.WorkflowContext, timeout: float | None) -> list[Any]:
        first = await ctx.wait_for("a", timeout=timeout)
        second = await ctx.wait_for("b", timeout=timeout)
        return [first.payload, second.payload]

    @registry.workflow(name="patient", version=1)
    async def patient(ctx: lf.WorkflowContext, timeout: float) -> str:
        try:
            got = await ctx.wait_for("go", timeout=timeout)
        except WaitTimeoutError:
            return "timed out"
        return f"got {got.payload}"

    @registry.workflow(name="approve", version=1)
    async def approve(ctx: lf.WorkflowContext, _: None) -> dict[str, Any]:
        decision = await ctx.wait_for_approval("refund", approvers=["alice", "bob"])
        return {"by": decision.sender, "decision": decision.payload}

    return registry


class World:
    """An engine for the worker, one for deliveries, one fake clock for both."""

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.clock = FakeClock()
        self.registry = _registry()

    def engine(self) -> lf.Engine:
        return lf.Engine(self.url, self.registry, clock=self.clock)

    async def work(self) -> None:
        async with self.engine() as engine:
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "journal.db")


def test_a_timer_releases_the_instance_and_fires_later(world: World) -> None:
    """A one-hour sleep: the instance is WAITING, unowned, due in an hour; nothing is due
    before; after the hour a worker finishes it."""

    async def main() -> None:
        async with world.engine() as engine:
            started = await engine.start("nap", key="n-1", input=3600)
        await world.work()
        async with world.engine() as engine:
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.WAITING
            assert record.owner is None
            assert record.available_at == pytest.approx(world.clock.now() + 3600)
            world.clock.advance(1800)
        await world.work()
        async with world.engine() as engine:
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.WAITING
        world.clock.advance(1801)
        await world.work()
        async with world.engine() as engine:
            assert await engine.result(started.instance_id, timeout=1) == "rested"

    asyncio.run(main())


def test_event_before_its_wait_and_reordered_events(world: World) -> None:
    """Events delivered before the instance ran, and in the reverse order of the waits, are
    each taken by the wait they name."""

    async def main() -> None:
        async with world.engine() as engine:
            started = await engine.start("two", key="t-1", input=None)
            await engine.signal(started.instance_id, "b", event_id="e-b", payload="second")
            await engine.signal(started.instance_id, "a", event_id="e-a", payload="first")
        await world.work()
        async with world.engine() as engine:
            assert await engine.result(started.instance_id, timeout=1) == ["first", "second"]
            inbox = (await engine.detail(started.instance_id)).inbox
            assert sorted((d.event_id, d.state) for d in inbox) == [
                ("e-a", "CONSUMED"),
                ("e-b", "CONSUMED"),
            ]

    asyncio.run(main())


@pytest.mark.parametrize("copies", [1, 2, 3, 4, 5])
def test_duplicated_deliveries_change_state_once(world: World, copies: int) -> None:
    """The same event delivered 1..5 times: one inbox row, one consumption; every repeat is
    answered DUPLICATE and changes nothing."""

    async def main() -> None:
        async with world.engine() as engine:
            started = await engine.start("patient", key=f"d-{copies}", input=3600)
        await world.work()
        async with world.engine() as engine:
            outcomes = [
                (await engine.signal(started.instance_id, "go", event_id="ev", payload=7)).outcome
                for _ in range(copies)
            ]
            assert outcomes == [lf.DeliveryOutcome.ACCEPTED] + [lf.DeliveryOutcome.DUPLICATE] * (
                copies - 1
            )
        await world.work()
        async with world.engine() as engine:
            assert await engine.result(started.instance_id, timeout=1) == "got 7"
            detail = await engine.detail(started.instance_id)
            assert [(d.event_id, d.state) for d in detail.inbox] == [("ev", "CONSUMED")]
            inbox_events = [e for e in detail.timeline if e.subject == "inbox"]
            assert [e.to_state for e in inbox_events] == ["PENDING", "CONSUMED"]
            again = await engine.signal(started.instance_id, "go", event_id="ev", payload=7)
            assert again.outcome is lf.DeliveryOutcome.DUPLICATE

    asyncio.run(main())


def test_late_events_are_kept_refused_and_change_nothing(world: World) -> None:
    """After the instance ended, a new event is refused as ENDED; an event naming a closed step
    is refused as LATE; both are kept in the inbox with the reason."""

    async def main() -> None:
        async with world.engine() as engine:
            started = await engine.start("patient", key="l-1", input=3600)
            await engine.signal(started.instance_id, "go", event_id="first", payload=1)
        await world.work()
        async with world.engine() as engine:
            late = await engine.signal(
                started.instance_id, "go", event_id="second", payload=2, for_step=1
            )
            assert late.outcome is lf.DeliveryOutcome.ENDED
            assert "has ended" in (late.delivery.reason or "")
            assert late.delivery.state == "REJECTED"
            record = await engine.get(started.instance_id)
            assert await engine.result(started.instance_id, timeout=1) == "got 1"
            assert record.status is lf.InstanceStatus.SUCCEEDED

        async with world.engine() as engine:
            other = await engine.start("two", key="l-2", input=None)
            await engine.signal(other.instance_id, "a", event_id="a1", payload="x")
        await world.work()
        async with world.engine() as engine:
            stale = await engine.signal(other.instance_id, "a", event_id="a2", for_step=1)
            assert stale.outcome is lf.DeliveryOutcome.LATE
            assert "step 1 is closed" in (stale.delivery.reason or "")
            old_run = await engine.signal(other.instance_id, "b", event_id="b0", run=7)
            assert old_run.outcome is lf.DeliveryOutcome.LATE
            assert (await engine.get(other.instance_id)).status is lf.InstanceStatus.WAITING

    asyncio.run(main())


def test_timeout_wins_only_when_no_event_arrived(world: World) -> None:
    """With no event the timeout wins (WaitTimeoutError into the workflow); an event delivered
    in the window between the wait's look at the inbox and its timeout commit wins instead."""

    async def main() -> None:
        async with world.engine() as engine:
            quiet = await engine.start("patient", key="r-1", input=60)
            racing = await engine.start("patient", key="r-2", input=60)
        await world.work()
        world.clock.advance(61)
        deliverer = world.engine()
        async with world.engine() as engine:
            store = engine.store
            real = store.pending_deliveries

            def racy(instance_id: Any, name: str) -> Any:
                seen = real(instance_id, name)
                if instance_id == racing.instance_id and not seen:
                    # Another process delivers the event right after the wait looked.
                    deliverer.store.deliver(
                        Deliver(
                            instance_id=instance_id,
                            event_id="just-in-time",
                            name="go",
                            payload="1",
                            sender=None,
                        ),
                        now=world.clock.now(),
                    )
                return seen

            store.pending_deliveries = racy  # type: ignore[method-assign]
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            assert await engine.result(quiet.instance_id, timeout=1) == "timed out"
            assert await engine.result(racing.instance_id, timeout=1) == "got 1"
        await deliverer.close()

    asyncio.run(main())


def test_only_named_approvers_decide(world: World) -> None:
    """A decision from someone not named, or from nobody named, is refused (NOT_APPROVER) and
    kept, its reason saying who sent it and who may approve (issue 24: an event with no sender
    read "None may not approve 'refund'"); one from a named approver is taken, and the result
    names who approved."""

    async def main() -> None:
        async with world.engine() as engine:
            started = await engine.start("approve", key="a-1", input=None)
        await world.work()
        async with world.engine() as engine:
            mallory = await engine.signal(
                started.instance_id, "refund", event_id="m", payload="yes", sender="mallory"
            )
            assert mallory.outcome is lf.DeliveryOutcome.NOT_APPROVER
            nobody = await engine.signal(started.instance_id, "refund", event_id="n", payload="yes")
            assert nobody.outcome is lf.DeliveryOutcome.NOT_APPROVER
            bob = await engine.signal(
                started.instance_id, "refund", event_id="b", payload="yes", sender="bob"
            )
            assert bob.outcome is lf.DeliveryOutcome.ACCEPTED
        await world.work()
        async with world.engine() as engine:
            result = await engine.result(started.instance_id, timeout=1)
            assert result == {"by": "bob", "decision": "yes"}
            inbox = {d.event_id: d for d in (await engine.detail(started.instance_id)).inbox}
            assert inbox["m"].state == "REJECTED"
            approvers = "(approvers: 'alice', 'bob')"
            assert inbox["m"].reason == f"'mallory' may not approve 'refund' {approvers}"
            assert inbox["n"].state == "REJECTED"
            assert (
                inbox["n"].reason == f"an event with no sender may not approve 'refund' {approvers}"
            )

    asyncio.run(main())


def test_a_waiting_instance_can_be_cancelled(world: World) -> None:
    """A cancel request wakes a waiting instance; the open wait is closed as cancelled and the
    instance ends CANCELLED."""

    async def main() -> None:
        async with world.engine() as engine:
            started = await engine.start("patient", key="c-1", input=3600)
        await world.work()
        async with world.engine() as engine:
            await engine.cancel(started.instance_id, reason="no longer needed")
        await world.work()
        async with world.engine() as engine:
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.CANCELLED
            assert "stopped while waiting" in (record.reason or "")

    asyncio.run(main())
