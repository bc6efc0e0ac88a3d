"""The attention part of the storage contract, on SQLite and PostgreSQL alike (the ``store``
fixture of ``conftest.py``; rows from ``ledger_records``).

Flags (raise once, clear once, kept after clearing), the crash-loop count a claim keeps and the
parking at its bound, a damaged row set aside by a claim, and the reads behind the scan and the
queue. Times are passed in explicitly, so leases expire by arithmetic, never by sleeping.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ledger_records import (
    LEASE,
    W1,
    W2,
    W3,
    W4,
    commit_of,
    commit_one,
    effect,
    effect_write,
    started,
    step,
    step_write,
)
from ledgerflow.ledger.attention import AttentionQuery
from ledgerflow.ledger.records import (
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    StepWrite,
)
from ledgerflow.model import detection
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import (
    InstanceId,
    WorkerId,
)
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.step import StepStatus
from ledgerflow.operators.attention import attention
from ledgerflow.runtime.detection import scan
from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store


def start(store: Store, key: str, *, tenant: str = "acme", workflow: str = "order") -> InstanceId:
    return started(store, key, tenant=tenant, workflow=workflow).instance_id


def claim(store: Store, owner: WorkerId, now: float, **kwargs: Any) -> list[InstanceRecord]:
    return store.claim(owner=owner, now=now, lease_seconds=LEASE, limit=10, **kwargs)


def commit(
    store: Store, record: InstanceRecord, *writes: StepWrite | EffectWrite, now: float
) -> None:
    assert commit_one(store, commit_of(record, *writes), now=now) is None


def price_step(record: InstanceRecord, *, now: float) -> StepWrite:
    done = step(record, 1, StepStatus.COMPLETED, output="1", updated_at=now)
    return step_write(done, StepStatus.NEW)


def charge_sent(record: InstanceRecord, *, now: float) -> EffectWrite:
    sent = effect(record, 2, participant="bank", operation="charge", updated_at=now)
    return effect_write(sent, EffectState.NEW)


def test_a_flag_is_raised_once_cleared_once_and_kept(store: Store) -> None:
    """Goal: at most one open flag per instance and reason; clearing is recorded, not deleted.

    Method: raise the same flag twice (the second is refused), clear it twice (the second
    finds nothing), then raise it again: a new open flag beside the cleared one.
    """
    i = start(store, "a")
    args: dict[str, Any] = {"instance_id": i, "reason_code": "stuck_step", "detected_by": "test"}
    assert store.raise_flag(**args, evidence="first", now=1.0)
    assert not store.raise_flag(**args, evidence="second", now=2.0)
    [flag] = store.open_flags(i)
    assert (flag.evidence, flag.detected_at, flag.cleared_at) == ("first", 1.0, None)
    assert store.raise_flag(
        instance_id=i, reason_code="stuck_unclaimed", evidence="x", detected_by="test", now=3.0
    )
    assert [f.reason_code for f in store.open_flags()] == ["stuck_step", "stuck_unclaimed"]
    clear: dict[str, Any] = {"instance_id": i, "reason_code": "stuck_step", "cleared_by": "alice"}
    assert store.clear_flag(**clear, reason="looked at it", now=4.0)
    assert not store.clear_flag(**clear, reason="again", now=5.0)
    assert [f.reason_code for f in store.open_flags(i)] == ["stuck_unclaimed"]
    assert store.raise_flag(**args, evidence="third", now=6.0)
    history = [(f.evidence, f.cleared_by, f.cleared_reason) for f in store.flags(i)]
    assert history == [
        ("first", "alice", "looked at it"),
        ("x", None, None),
        ("third", None, None),
    ]


def test_a_claim_counts_lease_expiries_and_parks_at_the_bound(store: Store) -> None:
    """Goal: an instance whose owners keep dying is parked by the claim that reaches the bound.

    Method: bound 3. Claim, let the lease lapse, claim again (1 expiry), again (2), and the
    fourth claim (3) parks it: MANUAL_INTERVENTION poison_crash_loop naming the dead owners,
    unowned, never handed out; only three 'claimed' events exist.
    """
    i = start(store, "loop")
    now = 1.0
    for owner in (W1, W2, W3):
        assert [r.instance_id for r in claim(store, owner, now, lease_expiries_max=3)] == [i]
        now += LEASE + 1
    assert claim(store, W4, now, lease_expiries_max=3) == []
    parked = store.get_instance(i)
    assert parked is not None
    assert parked.status is InstanceStatus.MANUAL_INTERVENTION
    assert parked.reason_code == detection.POISON_CRASH_LOOP
    assert parked.owner is None
    assert parked.reason is not None
    assert "3 times" in parked.reason
    assert all(w in parked.reason for w in (W1, W2, W3))
    claims = [e for e in store.timeline(i) if e.subject == "owner" and e.detail == "claimed"]
    assert [e.to_state for e in claims] == [W1, W2, W3]
    assert any(e.detail == detection.POISON_CRASH_LOOP for e in store.timeline(i))
    assert claim(store, W4, now + 100, lease_expiries_max=3) == []


def test_a_commit_resets_the_count(store: Store) -> None:
    """Goal: only expiries *in a row without progress* count.

    Method: two lapsed leases, then an owner commits a step; two more lapses stay below the
    bound of 3 and the instance is still handed out.
    """
    i = start(store, "progress")
    now = 1.0
    for owner in (W1, W2):
        claim(store, owner, now, lease_expiries_max=3)
        now += LEASE + 1
    [third] = claim(store, W3, now, lease_expiries_max=3)
    commit(store, third, price_step(third, now=now), now=now)
    now += LEASE + 1
    for owner in (W4, W1):
        assert [r.instance_id for r in claim(store, owner, now, lease_expiries_max=3)] == [i]
        now += LEASE + 1


def test_scan_flags_stuck_work_and_clears_it_when_gone(store: Store) -> None:
    """Goal: the three scanned conditions are flagged with evidence and cleared by 'detector'.

    Method: one instance owned and silent (stuck_step), one due and never claimed
    (stuck_unclaimed), one with an effect INTENDED and unanswered (participant_unresponsive);
    scan past the bounds; then make each condition go away and scan again.
    """
    bounds = DetectionBounds(
        step_deadline_seconds=50,
        unclaimed_after_seconds=50,
        participant_silent_seconds=20,
        # No worker is registered here: no_capable_worker has its own test.
        unserved_after_seconds=1000,
    )
    quiet, silent = start(store, "quiet"), start(store, "silent")
    claimed = {r.instance_id: r for r in claim(store, W1, 1.0)}
    unclaimed = start(store, "unclaimed")
    commit(store, claimed[silent], charge_sent(claimed[silent], now=2.0), now=2.0)
    # The owner is alive: its lease is renewed, but it commits nothing.
    leases = [(quiet, claimed[quiet].generation), (silent, claimed[silent].generation)]
    assert store.renew(owner=W1, leases=leases, now=60.0, lease_seconds=LEASE) == []
    report = scan(store, bounds, now=61.0)
    found = {(f.instance_id, f.reason_code): f.evidence for f in report.raised}
    assert set(found) == {
        (quiet, "stuck_step"),
        (unclaimed, "stuck_unclaimed"),
        (silent, "participant_unresponsive"),
    }
    assert "no commit for 60.0s" in found[quiet, "stuck_step"]
    key = charge_sent(claimed[silent], now=2.0).record.idempotency_key
    assert f"bank.charge key {key} attempt 1 INTENDED" in found[silent, "participant_unresponsive"]
    assert "due for 61.0s" in found[unclaimed, "stuck_unclaimed"]
    again = scan(store, bounds, now=62.0)
    assert (again.raised, again.still_open, again.cleared) == ((), 3, ())
    # Progress: quiet commits, the participant answers, a worker takes the unclaimed one.
    commit(store, claimed[quiet], price_step(claimed[quiet], now=63.0), now=63.0)
    answered = _confirmed(charge_sent(claimed[silent], now=63.0).record)
    confirmed = effect_write(answered, EffectState.INTENDED)
    commit(store, claimed[silent], confirmed, now=63.0)
    claim(store, W2, 63.0)
    cleared = scan(store, bounds, now=64.0)
    assert set(cleared.cleared) == set(found)
    assert store.open_flags() == []
    assert {f.cleared_by for i in (quiet, silent, unclaimed) for f in store.flags(i)} == {
        "detector"
    }


def _confirmed(record: EffectRecord) -> EffectRecord:
    return dataclasses.replace(record, state=EffectState.CONFIRMED, evidence='{"ok": true}')


def test_queue_lists_parked_and_flagged_oldest_first_with_filters(store: Store) -> None:
    """Goal: the queue holds parked instances and open flags, oldest first, filterable.

    Method: park one instance (crash loop, bound 1) and flag two others at later times; list
    all, then by tenant, workflow and reason, and with a limit.
    """
    parked = start(store, "p", tenant="t1", workflow="order")
    claim(store, W1, 1.0, lease_expiries_max=1)
    claim(store, W2, 1.0 + LEASE + 1, lease_expiries_max=1)
    flagged = start(store, "f", tenant="t2", workflow="refund")
    other = start(store, "g", tenant="t1", workflow="refund")
    store.raise_flag(
        instance_id=flagged, reason_code="stuck_step", evidence="e1", detected_by="test", now=100.0
    )
    store.raise_flag(
        instance_id=other,
        reason_code="stuck_unclaimed",
        evidence="e2",
        detected_by="test",
        now=200.0,
    )
    items = attention(store)
    assert [(i.kind, i.instance_id, i.reason_code) for i in items] == [
        ("parked", parked, "poison_crash_loop"),
        ("flag", flagged, "stuck_step"),
        ("flag", other, "stuck_unclaimed"),
    ]
    assert items[1].reason == "e1"
    assert items[1].detected_by == "test"
    assert items[0].status == "MANUAL_INTERVENTION"
    assert items[0].tenant == "t1"
    assert [i.instance_id for i in attention(store, AttentionQuery(tenant="t1"))] == [parked, other]
    assert [i.instance_id for i in attention(store, AttentionQuery(workflow="refund"))] == [
        flagged,
        other,
    ]
    assert [i.instance_id for i in attention(store, AttentionQuery(reason="stuck_step"))] == [
        flagged
    ]
    assert [i.instance_id for i in attention(store, AttentionQuery(limit=2))] == [parked, flagged]


def test_a_damaged_row_is_flagged_once_and_set_aside(tmp_path: Path) -> None:
    """Goal: a row that fails its invariants is flagged poison_corrupt_row once and stops being
    read by every claim, while healthy instances are claimed; once repaired it is due again.

    Method (SQLite: the row is damaged by a second connection, as a hand edit would): claim
    twice; the damaged row has one open flag, its due time is 'never', nothing else of it
    changed; next_available_at ignores it. Repair the row; a scan requeues it and clears the
    flag.
    """
    path = tmp_path / "s.db"
    store = open_store(f"sqlite:///{path}")
    try:
        bad, good = start(store, "bad"), start(store, "good")
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE lf_instances SET run = 'one' WHERE instance_id = ?", (bad,))
        assert [r.instance_id for r in claim(store, W1, 1.0)] == [good]
        assert claim(store, W2, 2.0) == []
        [flag] = store.open_flags(bad)
        assert flag.reason_code == "poison_corrupt_row"
        assert flag.detected_by == f"claim:{W1}"
        assert "corrupt lf_instances row" in flag.evidence
        owner, generation, available = conn.execute(
            "SELECT owner, generation, available_at FROM lf_instances WHERE instance_id = ?",
            (bad,),
        ).fetchone()
        assert (owner, generation, available) == (None, 0, 1e15)
        assert store.next_available_at() is not None  # the good one, still owned
        with conn:
            conn.execute("UPDATE lf_instances SET run = 1 WHERE instance_id = ?", (bad,))
        conn.close()
        report = scan(store, now=3.0)
        assert report.requeued == (bad,)
        assert store.open_flags(bad) == []
        assert [r.instance_id for r in claim(store, W2, 3.0)] == [bad]
    finally:
        store.close()


def test_the_last_chance_runs_alone(store: Store) -> None:
    """Goal: an instance one lapse from the bound is handed out only to a claimer that holds
    nothing else, and then as the only instance of that claim.

    Method: bound 3; two lapses bring 'suspect' to its last chance; a second instance is due
    too. A claimer that is not alone gets only the other one; an alone claimer gets only the
    suspect, although its limit would allow both.
    """
    suspect = start(store, "suspect")
    now = 1.0
    for owner in (W1, W2):
        claim(store, owner, now, lease_expiries_max=3)
        now += LEASE + 1
    other = start(store, "other")
    busy = claim(store, W3, now, lease_expiries_max=3, alone=False)
    assert [r.instance_id for r in busy] == [other]
    start(store, "third")  # due too, and after the suspect in claim order
    [alone] = claim(store, W4, now, lease_expiries_max=3, alone=True)
    assert alone.instance_id == suspect
    assert alone.lease_expiries == 2


def test_a_crash_loop_parks_an_effect_in_flight_as_unknown(store: Store) -> None:
    """Goal: an effect INTENDED when the owners kept dying may have been applied: the parked
    instance shows it UNKNOWN (in doubt), never as if nothing had been sent.

    Method: the first owner records the intent, then it and two more owners in a row let the
    lease lapse; the claim that parks the instance also moves the effect to UNKNOWN with an event.
    """
    i = start(store, "inflight")
    [first] = claim(store, W1, 1.0, lease_expiries_max=3)
    commit(store, first, charge_sent(first, now=1.0), now=1.0)
    now = 1.0 + LEASE + 1
    # The commit reset the count: W1's lapse is the first, W2's the second, W3's the third.
    for owner in (W2, W3):
        assert [r.instance_id for r in claim(store, owner, now, lease_expiries_max=3)] == [i]
        now += LEASE + 1
    assert claim(store, W4, now, lease_expiries_max=3) == []
    parked = store.get_instance(i)
    assert parked is not None
    assert parked.reason_code == "poison_crash_loop"
    [effect] = store.effects(i)
    assert effect.state is EffectState.UNKNOWN
    assert effect.doubt == effect.attempt == 1
    assert [(e.from_state, e.to_state) for e in store.timeline(i) if e.subject == "effect:2"] == [
        ("NEW", "INTENDED"),
        ("INTENDED", "UNKNOWN"),
    ]


def test_consistency_signals_count_parked_flagged_and_unknown(store: Store) -> None:
    """Goal: the journal's gauges (metrics) count parked instances and open flags by reason,
    and the UNKNOWN effects with the earliest last change among them.

    Method: an empty journal counts nothing; then a crash loop parks an instance with an effect
    in flight (UNKNOWN), and two flags are raised on another instance, one of them cleared.
    """
    empty = store.consistency_signals()
    assert (empty.parked_by_reason, empty.flagged_by_reason) == ({}, {})
    assert (empty.unknown_open, empty.unknown_oldest_at) == (0, None)
    i = start(store, "inflight")
    [first] = claim(store, W1, 1.0, lease_expiries_max=2)
    commit(store, first, charge_sent(first, now=1.0), now=1.0)
    now = 1.0 + LEASE + 1
    assert claim(store, W2, now, lease_expiries_max=2) != []
    assert claim(store, W3, now + LEASE + 1, lease_expiries_max=2) == []
    other = start(store, "flagged")
    for reason in ("stuck_lease", "stuck_effect"):
        store.raise_flag(
            instance_id=other, reason_code=reason, evidence="{}", detected_by="t", now=5.0
        )
    store.clear_flag(
        instance_id=other, reason_code="stuck_effect", cleared_by="t", reason="ok", now=6.0
    )
    signals = store.consistency_signals()
    assert signals.parked_by_reason == {"poison_crash_loop": 1}
    assert signals.flagged_by_reason == {"stuck_lease": 1}
    [effect] = store.effects(i)
    assert signals.unknown_open == 1
    assert signals.unknown_oldest_at == effect.updated_at


def test_the_console_home_counts_are_tenant_scoped(store: Store) -> None:
    """Goal: the counts by status and the consistency signals can be read for one tenant
    (the console's home page of a scoped principal), the same rules as for all.

    Method: acme parks an instance with an effect UNKNOWN (a crash loop); globex has an
    instance with an open flag and one more running. Per tenant each sees only its own
    parked, flagged, UNKNOWN and statuses; without a tenant all of them add up.
    """
    i = start(store, "inflight", tenant="acme")
    [first] = claim(store, W1, 1.0, lease_expiries_max=2)
    commit(store, first, charge_sent(first, now=1.0), now=1.0)
    now = 1.0 + LEASE + 1
    assert claim(store, W2, now, lease_expiries_max=2) != []
    assert claim(store, W3, now + LEASE + 1, lease_expiries_max=2) == []
    flagged = start(store, "flagged", tenant="globex")
    start(store, "other", tenant="globex")
    store.raise_flag(
        instance_id=flagged, reason_code="stuck_lease", evidence="{}", detected_by="t", now=5.0
    )
    acme = store.consistency_signals(tenant="acme")
    globex = store.consistency_signals(tenant="globex")
    every = store.consistency_signals()
    [effect] = store.effects(i)
    assert (acme.parked_by_reason, acme.flagged_by_reason) == ({"poison_crash_loop": 1}, {})
    assert (acme.unknown_open, acme.unknown_oldest_at) == (1, effect.updated_at)
    assert (globex.parked_by_reason, globex.flagged_by_reason) == ({}, {"stuck_lease": 1})
    assert (globex.unknown_open, globex.unknown_oldest_at) == (0, None)
    assert (every.parked_by_reason, every.flagged_by_reason, every.unknown_open) == (
        {"poison_crash_loop": 1}, {"stuck_lease": 1}, 1,
    )  # fmt: skip
    parked, running = InstanceStatus.MANUAL_INTERVENTION, InstanceStatus.RUNNING
    assert store.count_by_status(tenant="acme") == {parked: 1}
    assert store.count_by_status(tenant="globex") == {running: 2}
    assert store.count_by_status() == {parked: 1, running: 2}
    assert store.count_by_status(tenant="nobody") == {}


def test_started_instances_are_counted_by_bucket_and_status(store: Store) -> None:
    """Goal: the activity chart's counts: instances started in a window, by bucket of the
    window and status now, of one tenant or all; the window's end is excluded, and a read
    of too many buckets is refused.

    Method: starts at 0, 10 and 3,599 s (bucket 0), 3,600 (bucket 1, globex) and 7,200 (past
    a window [0, 7,200)): buckets 0 and 1 count 3 and 1; acme's bucket 1 counts nothing;
    a window of 2,000 one-second buckets is a ValueError.
    """
    for key, at, tenant in (("a", 0.0, "acme"), ("b", 10.0, "acme"), ("c", 3599.0, "acme"),
                            ("d", 3600.0, "globex"), ("e", 7200.0, "acme")):  # fmt: skip
        started(store, key, tenant=tenant, now=at)
    window: dict[str, Any] = {"since": 0.0, "until": 7200.0, "bucket_seconds": 3600.0}
    running = InstanceStatus.RUNNING
    counted = [(c.bucket, c.status, c.count) for c in store.started_by_bucket(**window)]
    assert counted == [(0, running, 3), (1, running, 1)]
    acme = store.started_by_bucket(**window, tenant="acme")
    assert [(c.bucket, c.count) for c in acme] == [(0, 3)]
    with pytest.raises(ValueError, match="at most"):
        store.started_by_bucket(since=0.0, until=2000.0, bucket_seconds=1.0)
