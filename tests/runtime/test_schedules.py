"""Schedules: one instance or one recorded non-firing per slot, whoever fires it.

Each test runs on both backends (``journal_url``) with a fake clock that the test moves, and
drives the schedulers' ticks itself (what every worker's periodic task calls), so each tick's
time is exact: engines racing on one journal with clocks skewed ±30 s, catch-up after a long
pause, the overlap policies against a run lasting three periods, daylight-saving transitions
in Europe/Berlin and America/New_York, backfill run twice, a manual trigger. After each, the
oracle's check (``oracle.one_firing_per_slot``) reads the journal's own rows. The issue's
scale (five deciders, 10,000 slots, a real worker killed at each statement of a firing) is
``test_schedules_scale.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ledgerflow as lf
import schedule_racing
from ledgerflow.cli.main import cli
from ledgerflow.errors import RegistrationError, ScheduleNotFoundError
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.ledger.schedules import SlotOutcome, SlotRecord
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.model.schedule import ScheduleSpec, iso_utc, jitter, next_slot, slots_between
from ledgerflow.operators.service import Operations
from ledgerflow.runtime.schedules import Scheduler
from ledgerflow.testing import FakeClock, oracle

T0 = 1_800_000_000.0  # a whole minute, UTC
MINUTE = 60.0


def _registry(**schedule: Any) -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="job", version=1)
    async def job(ctx: lf.WorkflowContext, payload: Any) -> dict[str, Any]:
        if isinstance(payload, dict) and payload.get("hold"):
            await ctx.wait_for("done")
        by = ctx.scheduled
        assert by is not None
        nominal = None if by.nominal_at is None else by.nominal_at.isoformat()
        return {"schedule": by.schedule, "nominal_at": nominal, "trigger": by.trigger_id}

    registry.schedule("every-minute", workflow=job, **{"every": MINUTE, **schedule})
    return registry


@contextlib.asynccontextmanager
async def _engine(
    url: str, registry: lf.Registry, clock: FakeClock
) -> AsyncIterator[tuple[lf.Engine, Scheduler]]:
    async with lf.Engine(url, registry, clock=clock) as engine:
        yield engine, Scheduler(runtime=engine.runtime, registry=registry, journal=engine.store)


def _slots(engine: lf.Engine, name: str = "every-minute") -> list[SlotRecord]:
    return sorted(engine.store.schedule_slots(name, limit=100_000), key=lambda s: s.nominal_at)


def _outcomes(engine: lf.Engine) -> list[str]:
    return [s.outcome.value for s in _slots(engine)]


def _clean(engine: lf.Engine) -> None:
    assert oracle.one_firing_per_slot(engine.store) == []


async def _finish(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_idle=True)


@pytest.mark.parametrize("skews", [(0.0, 0.0, 0.0), (-30.0, 0.0, 30.0)], ids=["same", "skewed"])
def test_racing_engines_decide_each_slot_once(journal_url: str, skews: tuple[float, ...]) -> None:
    """Three engines on one journal, their clocks the same or 30 s behind, on time and 30 s
    ahead, tick at once for 40 half periods (overlap allow_all, so every slot may fire):
    every slot the cursor passed has exactly one row, each FIRED row its one instance, and
    the ticks that met another's (held its rows, or decided them since the pass read them)
    left them to it, or lost and rolled back whole (their starts with them)."""

    async def main() -> None:
        registry = _registry(overlap="allow_all")
        clocks = [FakeClock(T0 + skew, autojump=False) for skew in skews]
        async with contextlib.AsyncExitStack() as stack:
            engines = [await stack.enter_async_context(_engine(journal_url, registry, c))
                       for c in clocks]  # fmt: skip
            for _, scheduler in engines:
                await scheduler.tick()  # declares (the first one wins; the rest see it)
            lost = 0
            for _ in range(40):
                for clock in clocks:
                    clock.advance(MINUTE / 2)
                reports = await asyncio.gather(*(s.tick() for _, s in engines))
                lost += sum(r.lost + r.passed for r in reports)
            engine = engines[0][0]
            slots = _slots(engine)
            schedule = engine.store.schedule("every-minute")
            assert schedule is not None
            spec = registry.schedules["every-minute"]
            expected = slots_between(
                spec, after=slots[0].nominal_at - 1, until=schedule.cursor - 1, limit=99
            )
            assert [s.nominal_at for s in slots] == list(expected)
            assert len(slots) >= 19
            if skews == (0.0, 0.0, 0.0):
                assert lost > 0  # the race was run, not avoided
            fired = [s for s in slots if s.outcome is SlotOutcome.FIRED]
            instances = await engine.list(workflow="job", limit=1000)
            assert sorted(i.instance_id for i in instances) == sorted(
                s.instance_id for s in fired if s.instance_id is not None
            )
            _clean(engine)

    asyncio.run(main())


def test_catch_up_latest_after_78_minutes_fires_once_and_records_the_rest_missed(
    journal_url: str,
) -> None:
    """No worker ticked for 78 minutes (a suspended process): the next tick fires the newest
    slot once and records the 77 before it MISSED, each with its reason."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        async with _engine(journal_url, _registry(), clock) as (engine, scheduler):
            await scheduler.tick()
            clock.advance(78 * MINUTE + 1)
            report = await scheduler.tick()
            assert (report.decided, report.fired) == (78, 1)
            outcomes = Counter(_outcomes(engine))
            assert outcomes == {"MISSED": 77, "FIRED": 1}
            slots = _slots(engine)
            assert slots[-1].outcome is SlotOutcome.FIRED
            assert {s.reason for s in slots[:-1]} == {"late: a later slot is due"}
            assert await scheduler.tick() == type(report)()  # nothing more is due
            _clean(engine)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [("skip", {"MISSED": 10}), ("all", {"MISSED": 5, "FIRED": 5})],
)
def test_catch_up_skip_and_all_within_the_window(
    journal_url: str, catch_up: str, expected: dict[str, int]
) -> None:
    """After ten late slots: skip records them all MISSED; all fires those within the window
    (five minutes here) and records the older ones MISSED ("outside the catch-up window")."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        registry = _registry(catch_up=catch_up, catch_up_window_seconds=5 * MINUTE + 30,
                             overlap="allow_all")  # fmt: skip
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            await scheduler.tick()
            clock.advance(11 * MINUTE + 5)  # slots 1..11 due; 1..10 are more than 60 s late
            await scheduler.tick()
            late = [s for s in _slots(engine) if s.lateness > 60]
            assert Counter(s.outcome.value for s in late) == expected
            _clean(engine)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("overlap", "while_running", "after"),
    [
        ("skip", ["FIRED", "SKIPPED", "SKIPPED", "SKIPPED"], ["FIRED"]),
        ("buffer_one", ["FIRED", "BUFFERED", "SKIPPED", "SKIPPED"], ["BUFFERED"]),
        ("buffer_all", ["FIRED", "BUFFERED", "BUFFERED", "BUFFERED"], ["BUFFERED"]),
        ("allow_all", ["FIRED", "FIRED", "FIRED", "FIRED"], ["FIRED"]),
    ],
)
def test_each_overlap_policy_against_a_run_lasting_three_periods(
    journal_url: str, overlap: str, while_running: list[str], after: list[str]
) -> None:
    """The first instance waits for a signal over three more periods; then it ends and the
    next period's tick decides. buffer_one fires its buffered slot first (its row goes from
    BUFFERED to FIRED) and buffers the new one behind it; buffer_all holds every overlapping
    slot and fires them one run after another, oldest first."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        registry = _registry(overlap=overlap, input={"hold": True})
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            await scheduler.tick()
            for _ in range(4):
                clock.advance(MINUTE)
                await scheduler.tick()
            assert _outcomes(engine) == while_running
            first = _slots(engine)[0]
            assert first.instance_id is not None
            for instance in await engine.list(workflow="job"):
                await engine.signal(instance.instance_id, "done", event_id="done-1")
            await _finish(engine)
            assert (await engine.get(first.instance_id)).status in FINAL_STATUSES
            clock.advance(MINUTE)
            await scheduler.tick()
            decided = _slots(engine)
            if overlap.startswith("buffer"):
                assert decided[1].outcome is SlotOutcome.FIRED  # the oldest buffered one fired
                assert decided[1].reason == "buffered: the overlap ended"
            if overlap == "buffer_all":  # the others wait their turn, oldest first
                assert [s.outcome.value for s in decided[2:4]] == ["BUFFERED", "BUFFERED"]
                await _drain(engine, scheduler, clock)
                assert all(s.outcome is SlotOutcome.FIRED for s in _slots(engine)[:5])
            assert [s.outcome.value for s in decided[4:]] == after
            _clean(engine)

    asyncio.run(main())


def _holding_registry(released: list[Any]) -> lf.Registry:
    """A job that books a slot with a compensation, then waits for ``done``."""
    registry = lf.Registry()
    rooms = registry.add_participant(lf.Participant("rooms", deduplicates=True))

    @rooms.effect(classification="compensatable", compensation="release")
    async def book(call: lf.EffectCall) -> Any:
        return {"booked": call.idempotency_key}

    @rooms.compensation("release")
    async def release(call: lf.EffectCall) -> Any:
        released.append(call.idempotency_key)
        return {}

    @registry.workflow(name="job", version=1)
    async def job(ctx: lf.WorkflowContext, payload: Any) -> Any:
        await ctx.effect(book, {"at": ctx.scheduled.nominal_at.isoformat()})  # type: ignore[union-attr]
        return (await ctx.wait_for("done")).payload

    registry.schedule("every-minute", workflow=job, every=MINUTE, overlap="cancel_other")
    return registry


def test_cancel_other_cancels_the_running_instance_with_its_compensation_then_fires(
    journal_url: str,
) -> None:
    """overlap cancel_other: the next slot asks the running instance to cancel, in the tick's
    transaction and audited under the schedule's name, and waits BUFFERED; the instance is
    cancelled and its booking released (the participant's own record); the next tick fires
    the buffered slot. A slot overlapping while the first is still cancelling is SKIPPED,
    its request a no-op."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        released: list[Any] = []
        registry = _holding_registry(released)
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            await scheduler.tick()  # declares it: the first slot is a minute away
            clock.advance(MINUTE)
            await scheduler.tick()
            await _finish(engine)  # the first slot's instance books, then waits
            for _ in range(2):
                clock.advance(MINUTE)
                await scheduler.tick()
            assert _outcomes(engine) == ["FIRED", "BUFFERED", "SKIPPED"]
            first = _slots(engine)[0].instance_id
            assert first is not None
            asked = await engine.get(first)
            assert asked.cancel_reason is not None
            assert "cancel_other" in asked.cancel_reason
            records = [r for r in engine.store.audit_records(AuditQuery(instance_id=first))
                       if r.kind == "cancel"]  # fmt: skip
            assert [(r.actor, r.outcome) for r in records] == [
                ("ledgerflow:schedule:every-minute", "applied"),
                ("ledgerflow:schedule:every-minute", "no-op"),
            ]
            await _finish(engine)
            ended = await engine.get(first)
            assert ended.status is lf.InstanceStatus.CANCELLED
            assert len(released) == 1
            clock.advance(1)  # within the period: only the buffered slot is due
            await scheduler.tick()
            decided = _slots(engine)
            assert decided[1].outcome is SlotOutcome.FIRED
            assert decided[1].reason == "buffered: the overlap ended"
            assert (await engine.get(first)).status is lf.InstanceStatus.CANCELLED
            _clean(engine)

    asyncio.run(main())


async def _drain(engine: lf.Engine, scheduler: Scheduler, clock: FakeClock) -> None:
    """Let each buffered slot's run end and the next tick fire the next one (bounded)."""
    for _ in range(8):
        for instance in await engine.list(workflow="job"):
            if instance.status not in FINAL_STATUSES:
                await engine.signal(instance.instance_id, "done", event_id="done-1")
        await _finish(engine)
        clock.advance(1)  # within the period: no new slot is due, only the buffered ones
        await scheduler.tick()


def _utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()


def test_daylight_saving_transitions_fire_ambiguous_times_once_and_gaps_just_after() -> None:
    """Europe/Berlin 02:30 daily: on 29 March 2026 02:30 does not exist and fires at 03:00
    CEST (01:00 UTC), the end of the gap; on 25 October it happens twice and fires once, the
    first time (00:30 UTC). America/New_York every half hour on 1 November 2026: 01:00 and
    01:30 happen twice and fire once each; on 8 March 2026 the 02:00 and 02:30 of the gap both
    land on 03:00 EDT, one slot."""
    berlin = ScheduleSpec(name="b", workflow="w", cron="30 2 * * *", tz="Europe/Berlin")
    spring = list(slots_between(berlin, after=_utc(2026, 3, 28), until=_utc(2026, 3, 31),
                                limit=10))  # fmt: skip
    assert [iso_utc(s) for s in spring] == [
        "2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z",
    ]  # fmt: skip
    autumn = list(slots_between(berlin, after=_utc(2026, 10, 24), until=_utc(2026, 10, 27),
                                limit=10))  # fmt: skip
    assert [iso_utc(s) for s in autumn] == [
        "2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z",
    ]  # fmt: skip
    york = ScheduleSpec(name="n", workflow="w", cron="*/30 * * * *", tz="America/New_York")
    back = list(slots_between(york, after=_utc(2026, 11, 1, 4, 45), until=_utc(2026, 11, 1, 7),
                              limit=20))  # fmt: skip
    assert [iso_utc(s) for s in back] == [
        "2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T07:00:00Z",
    ]  # fmt: skip
    forward = list(slots_between(york, after=_utc(2026, 3, 8, 6), until=_utc(2026, 3, 8, 8),
                                 limit=20))  # fmt: skip
    assert [iso_utc(s) for s in forward] == [
        "2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z",
        "2026-03-08T08:00:00Z",
    ]  # fmt: skip
    # A tick from inside the repeated hour still finds the next slot, not the past first one.
    assert iso_utc(next_slot(york, after=_utc(2026, 11, 1, 6, 10))) == "2026-11-01T07:00:00Z"


def test_a_schedule_across_berlins_spring_gap_fires_once_just_after_it(journal_url: str) -> None:
    """The same, through the journal: ticks every ten minutes across the night of 29 March
    2026 fire the 02:30 slot once, at 03:00 CEST."""

    async def main() -> None:
        registry = lf.Registry()

        @registry.workflow(name="job", version=1)
        async def job(ctx: lf.WorkflowContext, payload: Any) -> None:
            return None

        registry.schedule("nightly", workflow=job, cron="30 2 * * *", tz="Europe/Berlin")
        clock = FakeClock(_utc(2026, 3, 28, 23), autojump=False)
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            await scheduler.tick()
            for _ in range(18):
                clock.advance(10 * MINUTE)
                await scheduler.tick()
            slots = _slots(engine, "nightly")
            assert [(iso_utc(s.nominal_at), s.outcome.value) for s in slots] == [
                ("2026-03-29T01:00:00Z", "FIRED")
            ]
            _clean(engine)

    asyncio.run(main())


def test_backfill_twice_adds_nothing_and_a_trigger_takes_no_slot(journal_url: str) -> None:
    """A backfill of the ten minutes before the schedule existed fires those ten slots, each
    as its slot's instance; run again it fires none. A manual trigger starts its own instance
    (repeated with its request id: the same one), and the slot due next still fires; pause
    records the slots it passes SKIPPED "paused"; every change is audited."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        registry = _registry()
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            await scheduler.tick()
        url = journal_url
        with Operations(url, registry=registry, clock=clock) as operations:
            commands = operations.schedules("local:test")
            first = commands.backfill("every-minute", start=T0 - 10 * MINUTE, end=T0 + 3600,
                                      reason="before it existed")  # fmt: skip
            assert (len(first.fired), first.kept) == (10, 0)
            again = commands.backfill("every-minute", start=T0 - 10 * MINUTE, end=T0 + 3600)
            assert (again.fired, again.kept) == ([], 10)
            one = commands.trigger("every-minute", request_id="ops-1", reason="now please")
            same = commands.trigger("every-minute", request_id="ops-1")
            assert (one.new, same.new) == (True, False)
            assert one.instance.instance_id == same.instance.instance_id
            assert one.instance.business_key == "schedule:every-minute:trigger:ops-1"
            with pytest.raises(ScheduleNotFoundError):
                commands.pause("nope")
            assert commands.pause("every-minute", reason="maintenance")
            assert not commands.pause("every-minute")
            audit = operations.audit(AuditQuery(actor="local:test"))
            assert [(a.kind, a.outcome, a.target) for a in audit] == [
                ("schedule-backfill", "applied", "schedule:every-minute"),
                ("schedule-backfill", "no-op", "schedule:every-minute"),
                ("schedule-trigger", "applied", "schedule:every-minute"),
                ("schedule-trigger", "no-op", "schedule:every-minute"),
                ("schedule-pause", "applied", "schedule:every-minute"),
                ("schedule-pause", "no-op", "schedule:every-minute"),
            ]
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            clock.advance(2 * MINUTE)
            await scheduler.tick()
            assert _outcomes(engine)[-2:] == ["SKIPPED", "SKIPPED"]
            assert _slots(engine)[-1].reason == "paused"
            with Operations(url, registry=registry, clock=clock) as operations:
                assert operations.schedules("local:test").resume("every-minute")
            await _finish(engine)  # the trigger's run ends: the next slot's overlap is over
            clock.advance(MINUTE)
            await scheduler.tick()
            slots = _slots(engine)
            assert [s.outcome.value for s in slots] == ["FIRED"] * 10 + ["SKIPPED"] * 2 + ["FIRED"]
            assert slots[-1].instance_id != one.instance.instance_id
            await _finish(engine)
            result = await engine.result(one.instance.instance_id)
            assert result == {"schedule": "every-minute", "nominal_at": None, "trigger": "ops-1"}
            fired = slots[-1].instance_id
            assert fired is not None
            assert await engine.result(fired) == {
                "schedule": "every-minute",
                "nominal_at": datetime.fromtimestamp(slots[-1].nominal_at, UTC).isoformat(),
                "trigger": None,
            }
            _clean(engine)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("overlap", "held", "after"),
    [("skip", "SKIPPED", ["FIRED"]), ("buffer_one", "BUFFERED", ["BUFFERED"])],
)
def test_a_triggered_run_still_running_is_the_run_the_overlap_policy_sees(
    journal_url: str, overlap: str, held: str, after: list[str]
) -> None:
    """A manual trigger's run that has not ended holds back the next slot as a slot's run
    would (skip: SKIPPED, buffer_one: BUFFERED, each naming the triggered instance); once it
    ended, the buffered slot fires first and the next slot fires or waits its turn. A
    trigger made while a slot's run still runs does not hide that run."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        registry = _registry(overlap=overlap, input={"hold": True})
        async with _engine(journal_url, registry, clock) as (engine, scheduler):
            await scheduler.tick()
            with Operations(journal_url, registry=registry, clock=clock) as operations:
                started = operations.schedules("local:test").trigger("every-minute",
                                                                     request_id="t1")  # fmt: skip
            triggered = started.instance.instance_id
            await _finish(engine)  # the triggered run waits for "done"
            assert (await engine.get(triggered)).status not in FINAL_STATUSES
            clock.advance(MINUTE)
            await scheduler.tick()
            [slot] = _slots(engine)
            assert (slot.outcome.value, slot.reason) == (held, f"overlap: {triggered} is still "
                                                                "running")  # fmt: skip
            await engine.signal(triggered, "done", event_id="done-1")
            await _finish(engine)
            clock.advance(MINUTE)
            await scheduler.tick()
            assert [s.outcome.value for s in _slots(engine)] == [
                "FIRED" if held == "BUFFERED" else held,
                *after,
            ]
            running = _slots(engine)[-2 if held == "BUFFERED" else -1].instance_id
            with Operations(journal_url, registry=registry, clock=clock) as operations:
                operations.schedules("local:test").trigger("every-minute", request_id="t2")
            schedule = engine.store.schedule("every-minute")
            assert schedule is not None
            assert schedule.last_instance_id == running  # the slot's run, still running
            _clean(engine)

    asyncio.run(main())


def test_jitter_is_derived_from_the_slot_and_declarations_are_checked() -> None:
    """Jitter: the same delay for a slot on every worker, spread over the bound; a wrong
    declaration is refused at registration."""
    spec = ScheduleSpec(name="j", workflow="w", every_seconds=60, jitter_seconds=30)

    delays = [jitter(spec, T0 + 60 * i) for i in range(50)]
    assert delays == [jitter(spec, T0 + 60 * i) for i in range(50)]
    assert all(0 <= d < 30 for d in delays)
    assert len(set(delays)) == 50
    registry = lf.Registry()
    for bad in (
        {"every": 60, "cron": "* * * * *"},
        {},
        {"every": 0.5},
        {"cron": "not cron"},
        {"every": 60, "tz": "Mars/Olympus"},
        {"every": 60, "overlap": "sometimes"},
    ):
        with pytest.raises(RegistrationError):
            registry.schedule("bad", workflow="w", **bad)  # type: ignore[arg-type]


def test_the_command_line_lists_shows_pauses_and_triggers(tmp_path: Path) -> None:
    """``ledgerflow schedule``: list and show read the journal (show --json names each slot's
    outcome and reason), pause and resume say whether they changed anything, trigger starts
    under its own key and a repeat with its request id is the same instance."""
    url = f"sqlite:///{tmp_path}/journal.db"

    async def declare() -> None:
        clock = FakeClock(T0, autojump=False)
        async with _engine(url, schedule_racing.registry, clock) as (_, scheduler):
            await scheduler.tick()
            clock.advance(3.5)
            await scheduler.tick()

    asyncio.run(declare())
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["schedule", *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "heartbeat" in run("list", "--db", url)
    shown = json.loads(run("show", "heartbeat", "--db", url, "--json"))
    assert shown["every_seconds"] == 1.0
    assert [s["outcome"] for s in shown["slots"]] == ["FIRED", "FIRED", "FIRED"]
    assert (
        run("pause", "heartbeat", "--db", url, "--reason", "test") == "schedule heartbeat: paused\n"
    )
    assert run("pause", "heartbeat", "--db", url) == "schedule heartbeat: no change\n"
    assert run("resume", "heartbeat", "--db", url) == "schedule heartbeat: resumed\n"
    args = ("trigger", "schedule_racing:registry", "heartbeat", "--db", url, "--request-id", "r1")
    first = json.loads(run(*args, "--json"))
    again = json.loads(run(*args, "--json"))
    assert (first["created"], again["created"]) == (True, False)
    assert first["instance_id"] == again["instance_id"]
    missing = runner.invoke(cli, ["schedule", "show", "nope", "--db", url])
    assert isinstance(missing.exception, ScheduleNotFoundError)


def test_a_changed_spec_is_the_next_version_and_backfill_uses_the_spec_in_force(
    journal_url: str,
) -> None:
    """Every minute from T0, then (a deploy ten minutes later) every two minutes: the journal
    holds spec versions 1 and 2, the ticks after the change decide by version 2, and a
    backfill over the whole range fires the undecided slots before the change by version 1
    (each minute) and none after it twice."""

    async def main() -> None:
        clock = FakeClock(T0, autojump=False)
        async with _engine(journal_url, _registry(overlap="allow_all"), clock) as (_, first):
            await first.tick()
        clock.advance(10 * MINUTE)
        changed = _registry(overlap="allow_all", every=2 * MINUTE)
        async with _engine(journal_url, changed, clock) as (engine, second):
            await second.tick()
            for _ in range(3):
                clock.advance(2 * MINUTE)
                await second.tick()
            schedule = engine.store.schedule("every-minute")
            assert schedule is not None
            assert schedule.spec_version == 2
            assert [v for v, _, _ in engine.store.schedule_specs("every-minute")] == [1, 2]
            assert {s.spec_version for s in _slots(engine)} == {2}
            with Operations(journal_url, registry=changed, clock=clock) as operations:
                done = operations.schedules().backfill(
                    "every-minute", start=T0 - 1, end=T0 + 20 * MINUTE
                )
                again = operations.schedules().backfill(
                    "every-minute", start=T0 - 1, end=T0 + 20 * MINUTE
                )
            assert [n - T0 for n in done.fired] == [MINUTE * k for k in range(0, 11)]
            assert again.fired == []
            by_version = Counter(s.spec_version for s in _slots(engine))
            assert by_version == {1: 11, 2: 3}
            _clean(engine)

    asyncio.run(main())


def test_metrics_count_fired_missed_and_late_slots(tmp_path: Path) -> None:
    """After a 78-minute pause: one slot fired, 77 missed and late (decided more than a minute
    after they were due), and the lateness of all 78 observed, by schedule and outcome."""
    from prometheus_client import CollectorRegistry

    async def main() -> None:
        metrics = lf.Metrics(CollectorRegistry())
        clock = FakeClock(T0, autojump=False)
        registry = _registry()
        url = f"sqlite:///{tmp_path}/journal.db"
        async with lf.Engine(url, registry, clock=clock, metrics=metrics) as engine:
            await engine.tick_schedules()
            clock.advance(78 * MINUTE + 1)
            await engine.tick_schedules()

        def value(name: str, **labels: str) -> float | None:
            return metrics.registry.get_sample_value(name, {"schedule": "every-minute", **labels})

        assert value("ledgerflow_schedule_slots_total", outcome="fired") == 1
        assert value("ledgerflow_schedule_slots_total", outcome="missed") == 77
        assert value("ledgerflow_schedule_late_slots_total") == 77
        assert value("ledgerflow_schedule_slot_lateness_seconds_count") == 78

    asyncio.run(main())
