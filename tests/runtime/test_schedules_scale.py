"""Schedules at the issue's scale: five deciders, clocks skewed ±30 s, 10,000 slots, and a real
worker SIGKILLed at each statement of a firing.

In one process (fast, a fake clock each): five engines on one journal, their clocks spread
over ±30 s, tick together a hundred schedules of four overlap policies until 10,000 slots are
decided, across a downtime that makes slots late. In real processes: a worker killed at each
named point of a tick's transaction (its claim, its advance, its starts before the commit,
after the commit), then five worker processes race on the schedules. After each, the oracle's
check (``oracle.one_firing_per_slot``) reads the journal's own rows: exactly one instance or
one recorded non-firing per slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
import schedule_pair
from conditions import eventually
from ledgerflow.ledger.schedules import SlotOutcome, SlotRecord
from ledgerflow.model.schedule import slots_between
from ledgerflow.runtime.schedules import Scheduler
from ledgerflow.storage.store import Store
from ledgerflow.testing import FakeClock, oracle
from processes import TESTS, WAIT_SECONDS_MAX, worker_process

T0 = 1_800_000_000.0  # a whole minute, UTC
MINUTE = 60.0
SKEWS = (-30.0, -15.0, 0.0, 15.0, 30.0)
SCHEDULES = 100
# Overlap policies in turn; the fired runs never run here (no worker), so a watched policy
# sees its first run still going and holds back every later slot, each with its reason.
POLICIES = ("allow_all", "allow_all", "skip", "buffer_one")
ROUNDS = 95  # a minute each, plus the downtime's five: 100 slots a schedule, 10,000 in all
DOWNTIME_AT, DOWNTIME_MINUTES = 40, 5


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="job", version=1)
    async def job(ctx: lf.WorkflowContext, payload: Any) -> None:
        return None

    for n in range(SCHEDULES):
        overlap = POLICIES[n % len(POLICIES)]
        registry.schedule(f"s{n:03d}", workflow=job, every=MINUTE, overlap=overlap)
    return registry


def _all_slots(store: Store) -> dict[str, list[SlotRecord]]:
    return {
        s.name: sorted(store.schedule_slots(s.name, limit=10**6), key=lambda r: r.nominal_at)
        for s in store.schedules()
    }


def test_five_skewed_engines_decide_ten_thousand_slots_once_each(journal_url: str) -> None:
    """Five engines, clocks 30 s behind to 30 s ahead, tick a hundred schedules together once
    a minute of each clock for 95 minutes, with a five-minute stop of all of them after the
    40th: every schedule has a row for each slot from its first to its cursor (10,000 in all),
    no slot two; each FIRED row has its one instance and no instance is off the record; the
    late slots after the stop are MISSED but the latest; the watched policies held back
    every slot while their first run was still going (one slot BUFFERED for buffer_one)."""

    async def main() -> None:
        registry = _registry()
        clocks = [FakeClock(T0 + skew, autojump=False) for skew in SKEWS]
        async with contextlib.AsyncExitStack() as stack:
            engines = [await stack.enter_async_context(lf.Engine(journal_url, registry, clock=c))
                       for c in clocks]  # fmt: skip
            schedulers = [Scheduler(runtime=e.runtime, registry=registry, journal=e.store)
                          for e in engines]  # fmt: skip
            for scheduler in schedulers:
                await scheduler.tick()  # declares (the first one wins; the rest see it)
            met = 0
            for round_ in range(ROUNDS):
                step = MINUTE * (1 + (DOWNTIME_MINUTES if round_ == DOWNTIME_AT else 0))
                for clock in clocks:
                    clock.advance(step)
                reports = await asyncio.gather(*(s.tick() for s in schedulers))
                met += sum(r.passed + r.lost for r in reports)
            store = engines[0].store
            slots = _all_slots(store)
            assert sum(len(rows) for rows in slots.values()) >= 10_000
            for schedule in store.schedules():
                rows = slots[schedule.name]
                spec = registry.schedules[schedule.name]
                every = slots_between(spec, after=rows[0].nominal_at - 1,
                                      until=schedule.cursor - 1, limit=10**4)  # fmt: skip
                assert [r.nominal_at for r in rows] == list(every)
            assert met > 0  # the engines met on schedules: the race was run
            # A slot is late when the engine whose clock made it due found its row held by
            # one whose clock did not (it skips rows another tick holds): the next tick
            # decides it, by the catch-up policy. The stop's slots are late whoever decides.
            allow_all = Counter(r.outcome.value for r in slots["s000"])
            assert allow_all["MISSED"] >= DOWNTIME_MINUTES - 1
            assert set(allow_all) == {"FIRED", "MISSED"}
            skip = [r.outcome.value for r in slots["s002"]]
            assert skip[0] == "FIRED"
            assert set(skip[1:]) == {"SKIPPED", "MISSED"}
            held = Counter(r.outcome.value for r in slots["s003"])
            assert (held["FIRED"], held["BUFFERED"]) == (1, 1)
            assert set(held) == {"FIRED", "BUFFERED", "SKIPPED", "MISSED"}
            fired = {str(r.instance_id) for rows in slots.values() for r in rows
                     if r.outcome is SlotOutcome.FIRED}  # fmt: skip
            instances = store.list_instances(workflow_name="job", limit=10**6)
            assert {i.instance_id for i in instances} == fired
            assert oracle.one_firing_per_slot(store) == []

    asyncio.run(main())


# -- real worker processes: SIGKILLed at each statement of a firing, then five racing ----------

KILLS = {
    "after the claim": "schedule.after_claim",
    "after the advance": "schedule.after_advance",
    "before the commit": "schedule.before_fire",
    "after the commit": "schedule.after_fire",
}
RACING_WORKERS = 5


def _worker(url: str, log: Path, *, faults: list[dict[str, Any]] | None = None) -> Any:
    options = ("--lease-seconds", "2", "--poll-seconds", "0.05")
    return worker_process(
        "schedule_pair:registry", url, path=TESTS, log=log, options=options, faults=faults
    )


def _decided(engine: lf.SyncEngine) -> list[SlotRecord]:
    store = engine.store
    return [r for s in store.schedules() for r in store.schedule_slots(s.name, limit=10**4)]


@pytest.mark.slow
@pytest.mark.parametrize("kill", list(KILLS))
def test_a_worker_killed_at_each_statement_of_a_firing_then_five_racing(
    journal_url: str, tmp_path: Path, kill: str
) -> None:
    """SIGKILL a real worker process in its first tick that decides slots (two schedules a
    second, allow_all and skip): holding the rows it claimed, with the slots' rows and
    cursors written, with the instances written and the commit not made, or just after the
    commit. Then five worker processes race until ten more slots are decided. Nothing of a
    tick killed before its commit is on the journal; one killed after it is kept as it was;
    every slot the cursors passed has one row, each FIRED slot one instance whose result
    names its slot, and no instance is off the record."""
    log = tmp_path / "workers.log"
    killed = _worker(journal_url, log, faults=[{"point": KILLS[kill], "action": "kill"}])
    assert killed.wait(timeout=WAIT_SECONDS_MAX) == -signal.SIGKILL
    outside = lf.SyncEngine(journal_url, schedule_pair.registry)
    try:
        before = _decided(outside)
        if KILLS[kill] == "schedule.after_fire":  # both schedules' first slots, kept
            assert {s.name for s in before} == {"heartbeat", "pulse"}
        else:
            assert before == []
        racing = [_worker(journal_url, log) for _ in range(RACING_WORKERS)]
        try:
            eventually(lambda: len(_decided(outside)) >= 12, what="twelve slots decided")
        finally:
            for process in racing:
                process.terminate()
            for process in racing:
                process.wait(timeout=WAIT_SECONDS_MAX)
        slots = _decided(outside)
        kept = {(s.name, s.nominal_at): s for s in slots}
        assert all(kept[(s.name, s.nominal_at)] == s for s in before)
        instances = outside.store.list_instances(workflow_name="beat", limit=10**4)
        fired = {s.instance_id: s for s in slots if s.outcome is SlotOutcome.FIRED}
        assert sorted(fired) == sorted(i.instance_id for i in instances)
        for instance in instances:
            if instance.status is lf.InstanceStatus.SUCCEEDED:
                nominal = fired[instance.instance_id].nominal_at
                assert instance.result_value == datetime.fromtimestamp(nominal, UTC).isoformat()
        assert oracle.one_firing_per_slot(outside.store) == []
    finally:
        outside.close()
