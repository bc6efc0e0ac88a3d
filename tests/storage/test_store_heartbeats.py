"""The store's side of effect heartbeats, on both backends: a heartbeat is a write fenced on
(effect, attempt, owner generation), and a claim takes over an owner whose in-flight attempt's
heartbeat is overdue by the store's clock, once (the new owner is not taken over in turn).
"""

from __future__ import annotations

from dataclasses import replace

from ledger_records import (
    LEASE,
    W2,
    W3,
    claimed,
    commit_of,
    commit_one,
    effect,
    effect_write,
    step,
    step_write,
)
from ledgerflow.errors import AttemptSupersededError, FencedOutError
from ledgerflow.ledger.records import EffectHeartbeat, EffectRecord, InstanceRecord
from ledgerflow.model.effect import EffectState
from ledgerflow.model.step import StepStatus
from ledgerflow.storage.store import Store


def _in_flight(store: Store) -> tuple[InstanceRecord, EffectRecord]:
    """Claimed at 1.0 (lease to 11.0), with step 1 STARTED and its effect INTENDED."""
    mine = claimed(store, "k")
    intended = effect(mine, 1, EffectState.INTENDED)
    started = commit_of(
        mine,
        step_write(step(mine, 1, StepStatus.STARTED), StepStatus.NEW),
        effect_write(intended, EffectState.NEW),
    )
    assert commit_one(store, started) is None
    return mine, intended


def _beat(
    record: EffectRecord, *, at: float, details: str | None = None, attempt: int = 1
) -> EffectHeartbeat:
    return EffectHeartbeat(
        effect_id=record.effect_id,
        seq=record.seq,
        attempt=attempt,
        timeout_seconds=2.0,
        details=details,
        at=at,
    )


def test_a_heartbeat_is_kept_with_its_deadline_and_details(store: Store) -> None:
    """Goal: a heartbeat records when it came, until when the attempt is alive (its time plus
    the timeout), by which attempt and generation, and its details; a beat without details
    (the one made at dispatch) keeps the last ones."""
    mine, intended = _in_flight(store)
    assert commit_one(store, commit_of(mine, _beat(intended, at=3.0, details="7"))) is None
    assert commit_one(store, commit_of(mine, _beat(intended, at=4.0))) is None
    [row] = store.effects(mine.instance_id)
    assert (row.heartbeat_at, row.heartbeat_due_at) == (4.0, 6.0)
    assert (row.heartbeat_attempt, row.heartbeat_generation) == (1, mine.generation)
    assert row.heartbeat_details == "7"
    assert row.state is EffectState.INTENDED  # a heartbeat moves no state


def test_a_heartbeat_of_another_attempt_or_a_settled_effect_is_refused(store: Store) -> None:
    """Goal: the fence is the attempt in flight: a heartbeat naming attempt 2 while attempt 1
    is in flight, or any once the effect is UNKNOWN, is refused (LF312) and writes nothing."""
    mine, intended = _in_flight(store)
    refused = commit_one(store, commit_of(mine, _beat(intended, at=3.0, details="x", attempt=2)))
    assert isinstance(refused, AttemptSupersededError)
    assert (refused.code, refused.effect_id, refused.attempt) == ("LF312", intended.effect_id, 2)
    unknown = replace(intended, state=EffectState.UNKNOWN, doubt=1)
    assert commit_one(store, commit_of(mine, effect_write(unknown, EffectState.INTENDED))) is None
    late = commit_one(store, commit_of(mine, _beat(intended, at=4.0, details="y")))
    assert isinstance(late, AttemptSupersededError)
    [row] = store.effects(mine.instance_id)
    assert (row.heartbeat_at, row.heartbeat_details) == (None, None)


def test_a_heartbeat_from_a_stale_generation_is_fenced_out(store: Store) -> None:
    """Goal: the fence is the owner's generation too: once another worker claimed the
    instance, the old owner's heartbeat is refused (LF301) and writes nothing."""
    mine, intended = _in_flight(store)
    [taken] = store.claim(owner=W2, now=30.0, lease_seconds=LEASE, limit=10)
    assert taken.generation == mine.generation + 1
    refused = commit_one(store, commit_of(mine, _beat(intended, at=31.0, details="z")), now=31.0)
    assert isinstance(refused, FencedOutError)
    [row] = store.effects(mine.instance_id)
    assert row.heartbeat_details is None


def test_an_overdue_heartbeat_lets_a_claim_take_over_before_the_lease_runs_out(
    store: Store,
) -> None:
    """Goal: the store's clock decides that an attempt is cut off: with its heartbeat due at
    5.0 and the owner's lease to 11.0, no claim takes it at 4.5, one does at 6.0 (counting a
    lease expiry), and a third worker at 6.5 does not take it from the new owner (whose
    generation wrote no heartbeat yet)."""
    mine, intended = _in_flight(store)
    assert commit_one(store, commit_of(mine, _beat(intended, at=3.0))) is None
    assert store.claim(owner=W2, now=4.5, lease_seconds=LEASE, limit=10) == []
    [taken] = store.claim(owner=W2, now=6.0, lease_seconds=LEASE, limit=10)
    assert (taken.owner, taken.generation, taken.lease_expiries) == (W2, mine.generation + 1, 1)
    assert store.claim(owner=W3, now=6.5, lease_seconds=LEASE, limit=10) == []


def test_a_heartbeat_of_an_earlier_attempt_lets_no_claim_take_over(store: Store) -> None:
    """Goal: only the attempt in flight can be cut off: once attempt 2's intent is written
    (a re-dispatch), attempt 1's overdue heartbeat frees nothing."""
    mine, intended = _in_flight(store)
    assert commit_one(store, commit_of(mine, _beat(intended, at=3.0))) is None
    unknown = replace(intended, state=EffectState.UNKNOWN, doubt=1)
    again = replace(intended, state=EffectState.INTENDED, attempt=2, doubt=1)
    assert commit_one(store, commit_of(mine, effect_write(unknown, EffectState.INTENDED))) is None
    assert commit_one(store, commit_of(mine, effect_write(again, EffectState.UNKNOWN))) is None
    assert store.claim(owner=W2, now=6.0, lease_seconds=LEASE, limit=10) == []
