"""Parallel branches in one run: ``asyncio.gather``, ``asyncio.TaskGroup`` and ``ctx.gather``.

Three bookings run at once on in-process participants whose answers are held back by a gate,
so a test decides the order they finish in (the last called first). Each test checks the
journal: positions in the order the code called, the outcome of every dispatched effect
recorded, compensations in reverse position order, and a replay that takes the same positions.
Every test runs on a real SQLite file and on PostgreSQL when one is configured.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from authority_files import granting
from ledgerflow.errors import EffectFailedError, EffectRejectedError
from ledgerflow.ledger.records import Commit
from ledgerflow.operators.service import Operations
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash
from ledgerflow.testing import FakeClock

QUICK = lf.RetryPolicy(attempts_max=2, backoff_initial=timedelta(milliseconds=1))
NAMES = ("hotel", "car", "flight")
BOUND_SECONDS = 20.0


class Trip:
    """Three participants that each book and cancel, answering in the order ``finish``."""

    def __init__(
        self, finish: tuple[str, ...] = ("flight", "car", "hotel"), *, after_wait: str = "thanks"
    ) -> None:
        self.finish = finish
        self.after_wait = after_wait
        self.answered: list[str] = []
        self.applied: Counter[str] = Counter()
        self.cancelled: list[str] = []
        self.refuse: set[str] = set()
        self.registry = lf.Registry()
        self.book: dict[str, Any] = {}
        for name in NAMES:
            self._participant(name)
        self._workflows()

    async def _turn(self, name: str) -> None:
        """Hold the answer until every booking meant to finish before this one has."""
        before = self.finish[: self.finish.index(name)]
        async with asyncio.timeout(BOUND_SECONDS):
            while not all(b in self.answered for b in before):
                await asyncio.sleep(0.001)

    def _participant(self, name: str) -> None:
        participant = self.registry.add_participant(lf.Participant(name, deduplicates=True))

        @participant.compensation("cancel", retry=QUICK)
        async def cancel(call: lf.EffectCall) -> dict[str, Any]:
            self.cancelled.append(name)
            return {"cancelled": name}

        @participant.effect(classification="compensatable", retry=QUICK, compensation="cancel")
        async def book(call: lf.EffectCall) -> dict[str, Any]:
            await self._turn(name)
            self.answered.append(name)
            if name in self.refuse:
                raise EffectRejectedError("sold out", error_code="sold_out", retryable=False)
            self.applied[call.idempotency_key] += 1
            return {"booked": name}

        self.book[name] = book

    def _workflows(self) -> None:
        hotel, car, flight = (self.book[n] for n in NAMES)

        def note(evidence: dict[str, Any]) -> str:
            return f"noted {evidence['booked']}"

        @self.registry.workflow(name="gathered", version=1, business_failures=(EffectFailedError,))
        async def gathered(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            async def booked(effect: Any) -> str:
                evidence = await ctx.effect(effect, {"trip": trip})
                # Taken after the booking returned: the same position whatever finished first.
                return str(await ctx.step("note", note, evidence))

            notes = await asyncio.gather(booked(hotel), booked(car), booked(flight))
            return [*notes, await ctx.step("total", len, notes)]

        @self.registry.workflow(name="grouped", version=1, business_failures=(EffectFailedError,))
        async def grouped(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(ctx.effect(e, {"trip": trip})) for e in (hotel, car, flight)
                ]
            return [t.result() for t in tasks]

        @self.registry.workflow(name="helper", version=1, business_failures=(EffectFailedError,))
        async def helper(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            return await ctx.gather(*(ctx.effect(e, {"trip": trip}) for e in (hotel, car, flight)))

        @self.registry.workflow(name="sequential", version=1)
        async def sequential(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            return [await ctx.effect(e, {"trip": trip}) for e in (hotel, car, flight)]

        @self.registry.workflow(name="nested", version=1)
        async def nested(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            async def pair() -> list[Any]:
                return list(
                    await asyncio.gather(
                        ctx.effect(car, {"trip": trip}), ctx.effect(flight, {"trip": trip})
                    )
                )

            first, rest = await asyncio.gather(ctx.effect(hotel, {"trip": trip}), pair())
            late = asyncio.create_task(ctx.step("late", len, rest))
            return [first, *rest, await late]

        async def booked(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            calls = (ctx.effect(e, {"trip": trip}) for e in (hotel, car, flight))
            return await ctx.gather(*calls)

        if self.after_wait == "thanks":

            @self.registry.workflow(name="then_wait", version=1)
            async def then_wait(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
                evidence = await booked(ctx, trip)
                await ctx.wait_for("go")
                return [*evidence, await ctx.step("thanks", str, trip)]

        elif self.after_wait == "reordered":

            @self.registry.workflow(name="then_wait", version=2)
            async def then_wait_reordered(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
                calls = (ctx.effect(e, {"trip": trip}) for e in (car, hotel, flight))
                car_booked, hotel_booked, flight_booked = await ctx.gather(*calls)
                await ctx.wait_for("go")
                return [
                    hotel_booked,
                    car_booked,
                    flight_booked,
                    await ctx.step("thanks", str, trip),
                ]

        else:

            @self.registry.workflow(name="then_wait", version=1)
            async def then_wait_changed(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
                evidence = await booked(ctx, trip)
                await ctx.wait_for("go")
                return [*evidence, await ctx.step("welcome", str, trip)]

        @self.registry.workflow(name="waits", version=1)
        async def waits(ctx: lf.WorkflowContext, _: None) -> list[Any]:
            a, b = await asyncio.gather(ctx.wait_for("a"), ctx.wait_for("b"))
            return [a.payload, b.payload]

        @self.registry.workflow(name="book_and_wait", version=1)
        async def book_and_wait(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            async def approved() -> Any:
                decision = await ctx.wait_for("go")
                return await ctx.step("approved", str, decision.payload)

            booked, decision = await asyncio.gather(ctx.effect(hotel, {"trip": trip}), approved())
            return [booked, decision, await ctx.effect(car, {"trip": trip})]

        wire = self.registry.add_participant(lf.Participant("wire", deduplicates=True))

        @wire.effect(classification="forward-recovery-only", completes_by_callback=600)
        async def transfer(call: lf.EffectCall) -> dict[str, Any]:
            return {"accepted": call.idempotency_key}

        @self.registry.workflow(name="wire_and_book", version=1)
        async def wire_and_book(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            return list(
                await asyncio.gather(ctx.effect(transfer, {"trip": trip}), ctx.effect(hotel, trip))
            )

        @self.registry.workflow(name="nap_and_book", version=1)
        async def nap_and_book(ctx: lf.WorkflowContext, trip: int) -> list[Any]:
            async with asyncio.TaskGroup() as group:
                group.create_task(ctx.sleep(3600))
                booked = group.create_task(ctx.effect(flight, {"trip": trip}))
            return [booked.result()]


def _journal(engine: lf.SyncEngine, instance_id: str) -> list[tuple[int, str, str]]:
    detail = engine.detail(instance_id)
    return [(int(s.seq), s.kind.value, s.name) for s in sorted(detail.steps, key=lambda s: s.seq)]


async def _run(url: str, trip: Trip, workflow: str, *, key: str = "t1") -> str:
    async with lf.Engine(url, trip.registry) as engine:
        started = await engine.start(workflow, key=key, input=1)
        await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)
        return started.instance_id


def test_gathered_effects_take_positions_in_call_order_whatever_finishes_first(
    journal_url: str,
) -> None:
    """The flight, called last, is answered first and the hotel last: the journal holds the
    hotel, car, flight at positions 1, 2, 3, and the step each branch takes after its
    booking at 4, 5, 6 in the same order; the history replays clean against the code."""
    trip = Trip(finish=("flight", "car", "hotel"))
    instance_id = asyncio.run(_run(journal_url, trip, "gathered"))
    assert trip.answered == ["flight", "car", "hotel"]
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        record = engine.get(instance_id)
        assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
        assert engine.result(instance_id) == ["noted hotel", "noted car", "noted flight", 3]
        assert _journal(engine, instance_id) == [
            (1, "effect", "hotel.book"),
            (2, "effect", "car.book"),
            (3, "effect", "flight.book"),
            (4, "local", "note"),
            (5, "local", "note"),
            (6, "local", "note"),
            (7, "local", "total"),
        ]
        steps = {int(s.seq): s for s in engine.detail(instance_id).steps}
        assert [steps[n].input for n in (4, 5, 6)] == [
            '[{"booked":"hotel"}]',
            '[{"booked":"car"}]',
            '[{"booked":"flight"}]',
        ]
    with Operations(journal_url) as operations:
        (verdict,) = operations.replay(trip.registry)
    assert verdict.compatible, verdict
    assert verdict.replayed == 7


@pytest.mark.parametrize("finish", [("hotel", "car", "flight"), ("car", "flight", "hotel")])
def test_the_same_positions_whatever_the_finish_order(
    journal_url: str, finish: tuple[str, ...]
) -> None:
    trip = Trip(finish=finish)
    instance_id = asyncio.run(_run(journal_url, trip, "gathered"))
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert [name for _, _, name in _journal(engine, instance_id)] == [
            "hotel.book",
            "car.book",
            "flight.book",
            "note",
            "note",
            "note",
            "total",
        ]


def test_a_crash_mid_gather_never_dispatches_a_committed_effect_again(journal_url: str) -> None:
    """The worker dies once the flight's outcome is durable, the others still in flight: the
    next worker replays the flight from the journal (one application, under one key) and
    settles the two others by their own keys; the journal is the same as without a crash."""
    trip = Trip(finish=("flight", "car", "hotel"))

    async def crash() -> str:
        faults.install(
            FaultPlan([FaultRule(point="effect.after_outcome", action="crash", match={"seq": 3})])
        )
        try:
            async with lf.Engine(journal_url, trip.registry) as engine:
                started = await engine.start("gathered", key="t1", input=1)
                with pytest.raises(SimulatedCrash):
                    await engine.worker(lease_seconds=0.2, poll_seconds=0.01).run(until_idle=True)
        finally:
            faults.install(None)
        return started.instance_id

    async def recover() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)

    instance_id = asyncio.run(crash())
    # In flight: the hotel and car are INTENDED before the confirmed flight. The replay
    # checker proves the history up to there, not a divergence.
    with Operations(journal_url) as operations:
        (verdict,) = operations.replay(trip.registry)
    assert verdict.compatible, verdict
    trip.answered.clear()
    trip.finish = ("hotel", "car", "flight")
    asyncio.run(recover())
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        effects = {int(e.seq): e for e in engine.detail(instance_id).effects}
        assert [(e.participant, e.state.value) for _, e in sorted(effects.items())] == [
            ("hotel", "CONFIRMED"),
            ("car", "CONFIRMED"),
            ("flight", "CONFIRMED"),
        ]
        assert trip.applied[effects[3].idempotency_key] == 1
        assert "flight" not in trip.answered  # replayed from the journal, never sent again
        assert [name for _, _, name in _journal(engine, instance_id)][:3] == [
            "hotel.book",
            "car.book",
            "flight.book",
        ]


@pytest.mark.parametrize("workflow", ["grouped", "helper"])
def test_a_failed_branch_compensates_the_committed_ones_in_reverse_position_order(
    journal_url: str, workflow: str
) -> None:
    """The car (position 2) is refused for good after the flight (3) is booked, while the
    hotel (1) is still waiting for its answer: the car's failure returns after the hotel's
    booking (calls return in position order), and the failure compensates the flight, then
    the hotel, by descending position."""
    trip = Trip(finish=("flight", "car", "hotel"))
    trip.refuse.add("car")
    instance_id = asyncio.run(_run(journal_url, trip, workflow))
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        record = engine.get(instance_id)
        assert record.status is lf.InstanceStatus.COMPENSATED, record.reason
        states = {e.seq: (e.participant, e.state.value) for e in engine.detail(instance_id).effects}
        assert states[1] == ("hotel", "CONFIRMED")
        assert states[2] == ("car", "FAILED")
        assert states[3] == ("flight", "CONFIRMED")
        assert sorted(s for s in states if s < 0) == [-3, -1]
    assert trip.cancelled == ["flight", "hotel"]
    assert "hotel" in trip.answered


@pytest.mark.parametrize("workflow", ["grouped", "helper"])
def test_a_sibling_cancelled_mid_dispatch_still_records_its_outcome(
    journal_url: str, workflow: str
) -> None:
    """The hotel (position 1) is refused at once while the car and the flight are dispatched
    and unanswered: the TaskGroup cancels their branches, yet each dispatched booking ends
    truthfully (CONFIRMED, never left INTENDED), and both are compensated, the flight (3)
    before the car (2). The ending waits for the dispatched work, not only the branches."""
    trip = Trip(finish=("hotel", "flight", "car"))
    trip.refuse.add("hotel")
    instance_id = asyncio.run(_run(journal_url, trip, workflow))
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        record = engine.get(instance_id)
        assert record.status is lf.InstanceStatus.COMPENSATED, record.reason
        states = {e.seq: (e.participant, e.state.value) for e in engine.detail(instance_id).effects}
        assert states[1] == ("hotel", "FAILED")
        assert states[2] == ("car", "CONFIRMED")
        assert states[3] == ("flight", "CONFIRMED")
        assert sorted(s for s in states if s < 0) == [-3, -2]
    assert trip.answered == ["hotel", "flight", "car"]
    assert trip.cancelled == ["flight", "car"]


def test_nested_gathers_and_a_late_task_take_positions_in_call_order(journal_url: str) -> None:
    trip = Trip(finish=("flight", "hotel", "car"))
    instance_id = asyncio.run(_run(journal_url, trip, "nested"))
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert _journal(engine, instance_id) == [
            (1, "effect", "hotel.book"),
            (2, "effect", "car.book"),
            (3, "effect", "flight.book"),
            (4, "local", "late"),
        ]
    with Operations(journal_url) as operations:
        (verdict,) = operations.replay(trip.registry)
    assert verdict.compatible, verdict


def _count_commits(engine: lf.Engine) -> list[int]:
    """The number of writes of every commit of the instance, as the store receives them."""
    seen: list[int] = []
    store: Any = engine.store
    inner = store.commit

    def commit(commits: list[Commit], *, now: float) -> list[Exception | None]:
        seen.extend(len(c.writes) for c in commits)
        result: list[Exception | None] = inner(commits, now=now)
        return result

    store.commit = commit
    return seen


def test_the_intents_of_one_gather_are_one_commit(journal_url: str) -> None:
    """Three effects in one gather: their three write-ahead intents are made durable in one
    commit, before any of them is dispatched; the three outcomes and the ending follow. A
    sequential run of the same three effects makes seven commits; the gather makes five."""
    trip = Trip(finish=("flight", "car", "hotel"))

    async def main() -> list[int]:
        async with lf.Engine(journal_url, trip.registry) as engine:
            seen = _count_commits(engine)
            await engine.start("helper", key="t1", input=1)
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)
            return seen

    seen = asyncio.run(main())
    # The first commit of the run carries all three intents (a step and an effect each, and
    # the one cancel-request check).
    assert seen[0] == 7, seen
    assert len(seen) == 5, seen
    trip = Trip(finish=("hotel", "car", "flight"))

    async def one_by_one() -> list[int]:
        async with lf.Engine(journal_url, trip.registry) as engine:
            seen = _count_commits(engine)
            await engine.start("sequential", key="t2", input=1)
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)
            return seen

    assert len(asyncio.run(one_by_one())) == 7


def test_two_waits_in_a_gather_park_once_and_resume_at_their_positions(journal_url: str) -> None:
    """Two waits in one gather: the instance is WAITING once both are blocked (one commit
    starts both); an event for the second is taken on its own resumption, and the instance
    waits again for the first; the first's event ends it, each payload where it was asked."""
    trip = Trip()

    async def main() -> tuple[str, list[lf.InstanceStatus]]:
        seen = []
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("waits", key="w1", input=None)
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
            await worker.run(until_idle=True)
            seen.append((await engine.get(started.instance_id)).status)
            await engine.signal(started.instance_id, "b", payload="B", event_id="e-b")
            await worker.run(until_idle=True)
            seen.append((await engine.get(started.instance_id)).status)
            await engine.signal(started.instance_id, "a", payload="A", event_id="e-a")
            await worker.run(until_idle=True)
            seen.append((await engine.get(started.instance_id)).status)
            return started.instance_id, seen

    instance_id, seen = asyncio.run(main())
    assert seen == [
        lf.InstanceStatus.WAITING,
        lf.InstanceStatus.WAITING,
        lf.InstanceStatus.SUCCEEDED,
    ]
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        assert engine.result(instance_id) == ["A", "B"]
        assert _journal(engine, instance_id) == [(1, "wait", "wait:a"), (2, "wait", "wait:b")]
    with Operations(journal_url) as operations:
        (verdict,) = operations.replay(trip.registry)
    assert verdict.compatible, verdict


def test_a_wait_beside_an_effect_parks_only_once_the_effect_is_settled(journal_url: str) -> None:
    """A booking and a wait for approval at once: the instance parks WAITING only after the
    booking's outcome is durable (never with an effect in flight); the approval resumes it,
    the booking is answered from the journal, and the car is booked after both."""
    trip = Trip(finish=("hotel", "car", "flight"))

    async def main() -> tuple[str, lf.InstanceStatus]:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("book_and_wait", key="bw", input=1)
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
            await worker.run(until_idle=True)
            parked = (await engine.get(started.instance_id)).status
            await engine.signal(started.instance_id, "go", payload="yes", event_id="go-1")
            await worker.run(until_idle=True)
            return started.instance_id, parked

    instance_id, parked = asyncio.run(main())
    assert parked is lf.InstanceStatus.WAITING
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert _journal(engine, instance_id) == [
            (1, "effect", "hotel.book"),
            (2, "wait", "wait:go"),
            (3, "local", "approved"),
            (4, "effect", "car.book"),
        ]
        assert engine.result(instance_id) == [{"booked": "hotel"}, "yes", {"booked": "car"}]
    assert trip.answered == ["hotel", "car"]


def test_a_timer_in_a_task_group_fires_after_its_sibling_booked(tmp_path: Path) -> None:
    """An hour's sleep beside a booking: the booking is confirmed at once, the instance is
    WAITING for the timer, and after the hour it ends without booking again."""
    trip = Trip(finish=("flight", "car", "hotel"))
    clock = FakeClock()
    url = f"sqlite:///{tmp_path}/journal.db"

    async def work() -> None:
        async with lf.Engine(url, trip.registry, clock=clock) as engine:
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

    async def main() -> tuple[str, lf.InstanceStatus]:
        async with lf.Engine(url, trip.registry, clock=clock) as engine:
            started = await engine.start("nap_and_book", key="nb", input=1)
        await work()
        async with lf.Engine(url, trip.registry, clock=clock) as engine:
            parked = (await engine.get(started.instance_id)).status
        clock.advance(3601)
        await work()
        return started.instance_id, parked

    instance_id, parked = asyncio.run(main())
    assert parked is lf.InstanceStatus.WAITING
    with lf.SyncEngine(url, trip.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert engine.result(instance_id) == [{"booked": "flight"}]
    assert trip.answered == ["flight"]


def test_a_callback_wait_in_a_branch_waits_beside_its_sibling(journal_url: str) -> None:
    """An asynchronous effect's callback wait inside branches (issue 26): the instance is
    WAITING once the sibling's booking ended (never with it in flight); the callback resumes
    it, and it ends with both values in call order, the hotel booked once."""
    trip = Trip(finish=("hotel", "car", "flight"))

    async def main() -> tuple[str, lf.InstanceStatus, dict[str, str]]:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("wire_and_book", key="t1", input=1)
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
            await worker.run(until_nothing_due=True)
            parked = (await engine.get(started.instance_id)).status
            effects = (await engine.detail(started.instance_id)).effects
            states = {e.participant: e.state.value for e in effects}
            (wire,) = (e for e in effects if e.participant == "wire")
            await engine.complete_effect(wire.idempotency_key, applied=True, evidence="W-1")
            await worker.run(until_nothing_due=True)
            return started.instance_id, parked, states

    instance_id, parked, states = asyncio.run(main())
    assert parked is lf.InstanceStatus.WAITING
    assert states == {"wire": "ACCEPTED", "hotel": "CONFIRMED"}
    with lf.SyncEngine(journal_url, trip.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert engine.result(instance_id) == ["W-1", {"booked": "hotel"}]
    assert trip.answered == ["hotel"]
    with Operations(journal_url) as operations:
        (verdict,) = operations.replay(trip.registry)
    assert verdict.compatible, verdict


def test_an_upgrade_moves_a_gathered_history_and_the_new_code_resumes_it(
    journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three gathered bookings, then a wait: the history replays clean against changed code
    (another step after the wait), the upgrade moves it, and the new code resumes at the wait
    with the three bookings answered from the journal, none sent again."""
    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", granting(tmp_path, "upgrade", actors=("al",)))
    old = Trip()
    instance_id = asyncio.run(_run(journal_url, old, "then_wait"))
    new = Trip(after_wait="welcome")
    fingerprint = new.registry.get("then_wait", 1).fingerprint
    assert fingerprint != old.registry.get("then_wait", 1).fingerprint
    with Operations(journal_url) as operations:
        assert operations.detail(instance_id).instance.status is lf.InstanceStatus.WAITING
        report = operations.upgrade(
            new.registry, workflow="then_wait", version=1, to_fingerprint=fingerprint, actor="al"
        )
    assert [o.outcome for o in report.outcomes] == ["moved"]

    async def go() -> None:
        async with lf.Engine(journal_url, new.registry) as engine:
            await engine.signal(instance_id, "go", event_id="go-1")
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(go())
    with lf.SyncEngine(journal_url, new.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert [name for _, _, name in _journal(engine, instance_id)] == [
            "hotel.book",
            "car.book",
            "flight.book",
            "wait:go",
            "welcome",
        ]
    assert new.answered == []
    assert sorted(old.applied.values()) == [1, 1, 1]


def test_a_migration_moves_gathered_positions_and_keeps_each_effects_key(
    journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2 calls the car before the hotel in its gather: a declared plan swaps their
    positions, the history replays clean against version 2, each effect keeps the id and key
    it was minted with, and version 2 resumes it with nothing sent again."""
    from ledgerflow.operators.upgrades import MigrationPlan

    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", granting(tmp_path, "migrate", actors=("al",)))
    old = Trip()
    instance_id = asyncio.run(_run(journal_url, old, "then_wait"))
    new = Trip(after_wait="reordered")
    plan = MigrationPlan(workflow="then_wait", from_version=1, to_version=2, positions={1: 2, 2: 1})
    with Operations(journal_url) as operations:
        before = {e.participant: e.idempotency_key for e in operations.detail(instance_id).effects}
        report = operations.migrate_instances(new.registry, plan, actor="al")
        detail = operations.detail(instance_id)
    assert [o.outcome for o in report.outcomes] == ["moved"]
    assert detail.instance.workflow_version == 2
    assert sorted((int(e.seq), e.participant) for e in detail.effects) == [
        (1, "car"),
        (2, "hotel"),
        (3, "flight"),
    ]
    assert {e.participant: e.idempotency_key for e in detail.effects} == before

    async def go() -> None:
        async with lf.Engine(journal_url, new.registry) as engine:
            await engine.signal(instance_id, "go", event_id="go-1")
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(go())
    with lf.SyncEngine(journal_url, new.registry) as engine:
        assert engine.get(instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert engine.result(instance_id)[:3] == [
            {"booked": "hotel"},
            {"booked": "car"},
            {"booked": "flight"},
        ]
    assert new.answered == []
