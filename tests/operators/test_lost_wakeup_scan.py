"""The safety net under lost wake-ups: the stuck-work scan flags a waiting instance that holds
what would move it on, and makes it due; a callback waiting in the inbox is not blamed on its
participant.

The journal with a lost wake-up is made the way the old engine made it: the park of before the
fix (tests/lost_wakeups.py) and an arrival landed between the worker's read and that park.
The scan and the worker that then recover it are today's. Both backends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.model import detection
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime import faults
from ledgerflow.runtime.detection import scan
from ledgerflow.testing import FakeClock
from lost_wakeups import ArriveAt, registry, revert_arrival_flag

BOUNDS = DetectionBounds(arrival_unanswered_seconds=5, participant_silent_seconds=5)


class Journal:
    def __init__(self, url: str) -> None:
        self.url = url
        self.registry = registry
        self.outside = lf.SyncEngine(url, self.registry)

    def work(self, plan: faults.FaultPlan | None = None, *, later: float = 0.0) -> None:
        """A worker until nothing is due, its clock ``later`` seconds ahead of now."""
        clock = FakeClock(start=time.time() + later)

        async def run() -> None:
            async with lf.Engine(self.url, self.registry, clock=clock) as engine:
                worker = engine.worker(lease_seconds=30, poll_seconds=0.05)
                await asyncio.wait_for(worker.run(until_nothing_due=True), timeout=60)

        faults.install(plan)
        try:
            asyncio.run(run())
        finally:
            faults.install(None)

    def lose_a_wakeup(self, monkeypatch: pytest.MonkeyPatch, point: str, arrive: Any) -> None:
        """Run with the old park, the arrival landing between the read and the park."""
        with monkeypatch.context() as reverted:
            revert_arrival_flag(reverted)
            plan = ArriveAt(point, arrive)
            self.work(plan)
            assert plan.arrived

    def scan(self, *, later: float) -> Any:
        return scan(self.outside.store, BOUNDS, now=time.time() + later)


@pytest.fixture
def journal(journal_url: str) -> Iterator[Journal]:
    journal = Journal(journal_url)
    yield journal
    journal.outside.close()


def _flags(journal: Journal, instance_id: str) -> list[str]:
    return [f.reason_code for f in journal.outside.store.open_flags(InstanceId(instance_id))]


def test_an_event_slept_through_is_flagged_and_woken(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = journal.outside.start("two", key="e-1")
    iid = started.instance_id
    journal.outside.signal(iid, "a", event_id="a-1", payload=1)
    journal.lose_a_wakeup(
        monkeypatch,
        "wait.before_suspend",
        lambda: journal.outside.signal(iid, "b", event_id="b-1", payload=2),
    )
    lost = journal.outside.get(iid)
    assert lost.status is lf.InstanceStatus.WAITING
    assert lost.available_at > time.time() + 3600  # asleep for ever, "b" in its inbox

    # Younger than the bound: not yet a finding (the instance may be about to take it).
    assert not journal.scan(later=0).raised
    report = journal.scan(later=10)
    [finding] = report.raised
    assert finding.reason_code == detection.STUCK_ARRIVAL
    assert "event 'b' (b-1) for step 2" in finding.evidence
    assert "due never" in finding.evidence
    assert journal.outside.get(iid).available_at <= time.time() + 10  # made due
    assert _flags(journal, iid) == [detection.STUCK_ARRIVAL]

    journal.work(later=20)
    assert journal.outside.result(iid, timeout=1) == [1, 2]
    journal.scan(later=30)
    assert _flags(journal, iid) == []  # the condition is gone: cleared by the detector


def test_a_cancel_slept_through_at_a_timer_is_flagged_and_honoured(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = journal.outside.start("nap", key="c-1")
    iid = started.instance_id
    journal.work()
    journal.outside.signal(iid, "poke", event_id="poke-1")
    journal.lose_a_wakeup(
        monkeypatch,
        "wait.before_suspend",
        lambda: journal.outside.cancel(iid, reason="not needed"),
    )
    assert journal.outside.get(iid).status is lf.InstanceStatus.WAITING
    [finding] = journal.scan(later=10).raised
    assert finding.reason_code == detection.STUCK_ARRIVAL
    assert "a cancel request of" in finding.evidence
    journal.work(later=20)
    record = journal.outside.get(iid)
    assert record.status is lf.InstanceStatus.CANCELLED
    assert record.cancel_outcome == "honoured"


def test_a_callback_in_the_inbox_is_a_lost_wakeup_not_a_silent_participant(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = journal.outside.start("pay", key="p-1", input=5)
    iid = started.instance_id

    def call_back() -> None:
        [effect] = journal.outside.detail(iid).effects
        journal.outside.complete_effect(effect.idempotency_key, applied=True, evidence={"r": 1})

    journal.lose_a_wakeup(monkeypatch, "effect.before_suspend", call_back)
    assert journal.outside.get(iid).status is lf.InstanceStatus.WAITING
    report = journal.scan(later=10)
    # The participant answered: its answer waits in the inbox. Only the lost wake-up is found.
    assert [f.reason_code for f in report.raised] == [detection.STUCK_ARRIVAL]
    assert "completion callback" in report.raised[0].evidence
    journal.work(later=20)
    assert journal.outside.result(iid, timeout=1) == {"r": 1}


def test_an_instance_waiting_for_what_has_not_come_is_not_flagged(journal: Journal) -> None:
    """Waiting for "a" with "b" (for a later wait) in the inbox, or awaiting a callback with a
    cancel request (the effect in flight finishes first), is waiting as it should."""
    first = journal.outside.start("two", key="q-1").instance_id
    journal.outside.signal(first, "b", event_id="b-early", payload=2)
    paying = journal.outside.start("pay", key="q-2", input=5).instance_id
    journal.work()
    journal.outside.cancel(paying, reason="too late to stop the transfer")
    journal.work()  # the request woke it; the transfer is in flight, so it parks again
    assert journal.outside.get(paying).status is lf.InstanceStatus.WAITING
    report = journal.scan(later=10)
    assert detection.STUCK_ARRIVAL not in {f.reason_code for f in report.raised}
