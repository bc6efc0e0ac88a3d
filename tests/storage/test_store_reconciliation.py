"""The reconciliation part of the storage contract, on SQLite and PostgreSQL alike (the
``store`` fixture of ``conftest.py``; rows from ``ledger_records``).

Which effects a run compares (settled ones, and doubt only where the instance is parked; only
participants that have a lookup), in which order (least recently compared first, so bounded runs
take turns), and the run record (begun, finished once with its counts and details, listed
newest first). Times are passed in explicitly.
"""

from __future__ import annotations

import dataclasses

import pytest

from ledger_records import (
    W1,
    claimed,
    effect,
    effect_write,
    instance_write,
)
from ledgerflow.errors import ConcurrencyError
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import (
    Commit,
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
)
from ledgerflow.model.effect import EffectState
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.storage.store import Store


def applied(instance: InstanceRecord, seq: int, participant: str) -> EffectRecord:
    """The intent of an effect of ``participant`` at step ``seq``."""
    return effect(instance, seq, participant=participant, operation="apply", updated_at=1.0)


def settle(
    store: Store,
    instance: InstanceRecord,
    outcomes: dict[int, tuple[str, EffectState]],
    *,
    park: bool = False,
) -> None:
    """Intend and settle effects (seq -> participant, final state) in one owner's commits."""
    intended = [applied(instance, seq, p) for seq, (p, _) in outcomes.items()]
    writes: list[EffectWrite | InstanceWrite] = [effect_write(e, EffectState.NEW) for e in intended]
    for e, (_, state) in zip(intended, outcomes.values(), strict=True):
        evidence = '{"receipt": 1}' if state is EffectState.CONFIRMED else None
        doubt = 1 if state is EffectState.UNKNOWN else 0
        final = dataclasses.replace(e, state=state, evidence=evidence, doubt=doubt)
        writes.append(effect_write(final, EffectState.INTENDED))
    if park:
        writes.append(
            instance_write(
                status=InstanceStatus.MANUAL_INTERVENTION,
                expected=InstanceStatus.RUNNING,
                reason_code="effect_outcome_unknown",
                reason="test",
                release=True,
            )
        )
    commit = Commit(
        instance_id=instance.instance_id,
        owner=W1,
        generation=instance.generation,
        writes=tuple(writes),
    )
    assert store.commit([commit], now=2.0) == [None]


def positions(found: list[EffectRecord]) -> list[str]:
    """Each effect as ``business key:step``, the way the tests name them."""
    return [f"{e.instance_id.rsplit('-', 1)[-1]}:{e.seq}" for e in found]


def test_candidates_are_settled_effects_and_parked_doubt_of_asked_participants(
    store: Store,
) -> None:
    """Goal: a run compares only what a lookup can settle or contradict, and never races a
    live worker over its own doubt.

    Method: a running instance with a CONFIRMED, a FAILED, an UNKNOWN and an INTENDED effect
    of 'bank', and a CONFIRMED one of 'legacy'; a parked instance with an UNKNOWN 'bank'
    effect. Asking for 'bank' returns the CONFIRMED, the FAILED and the parked UNKNOWN only;
    asking for no participant returns nothing.
    """
    s = EffectState
    live = claimed(store, "live")
    parked = claimed(store, "parked")
    settle(
        store,
        live,
        {1: ("bank", s.CONFIRMED), 2: ("bank", s.FAILED), 3: ("bank", s.UNKNOWN)},
    )
    settle(store, live, {5: ("legacy", s.CONFIRMED)})
    assert store.commit(
        [
            Commit(
                instance_id=live.instance_id,
                owner=W1,
                generation=live.generation,
                writes=(effect_write(applied(live, 4, "bank"), s.NEW),),
            )
        ],
        now=2.0,
    ) == [None]
    settle(store, parked, {1: ("bank", s.UNKNOWN)}, park=True)

    found = store.reconcile_candidates(participants=["bank"], limit=100)
    assert sorted(positions(found)) == ["live:1", "live:2", "parked:1"]
    assert {e.state for e in found} == {s.CONFIRMED, s.FAILED, s.UNKNOWN}
    assert store.reconcile_candidates(participants=[], limit=100) == []
    both = store.reconcile_candidates(participants=["bank", "legacy"], limit=100)
    assert len(both) == 4


def test_least_recently_compared_first_so_bounded_runs_take_turns(store: Store) -> None:
    """Goal: consecutive bounded runs walk the whole ledger instead of re-reading its head.

    Method: five CONFIRMED effects. Limit 2 returns the first two by id (never compared); a
    finished run stamps them; the next read returns the next two, then the fifth and the
    oldest stamped one. Stamping changes nothing the ledger claims.
    """
    instance = claimed(store, "many")
    settle(store, instance, {n: ("bank", EffectState.CONFIRMED) for n in range(1, 6)})
    before = store.effects(instance.instance_id)
    order: list[list[str]] = []
    for at in (10.0, 20.0, 30.0):
        found = store.reconcile_candidates(participants=["bank"], limit=2)
        order.append(positions(found))
        run_id = store.begin_reconciliation(actor="test", now=at)
        run = ReconciliationRun(
            run_id=run_id, actor="test", started_at=at, finished_at=None, compared=len(found)
        )
        store.finish_reconciliation(run, compared_ids=[e.effect_id for e in found], now=at + 1)
    assert order == [
        ["many:1", "many:2"],
        ["many:3", "many:4"],
        ["many:5", "many:1"],
    ]
    assert store.effects(instance.instance_id) == before


def test_a_run_is_recorded_finished_once_and_listed_newest_first(store: Store) -> None:
    """Goal: the run record is the evidence of what a run did, and is not rewritten.

    Method: begin two runs; finish the first with counts and a detail line; finishing it again
    is refused; the listing shows the second (unfinished) first, then the first with exactly
    what was written.
    """
    first = store.begin_reconciliation(actor="ledgerflow:reconciler", now=5.0)
    second = store.begin_reconciliation(actor="alice", now=6.0)
    line = {"effect_id": "e1", "action": "escalated", "flag": "effect_drift", "audit_id": None}
    run = ReconciliationRun(
        run_id=first,
        actor="ledgerflow:reconciler",
        started_at=5.0,
        finished_at=None,
        compared=3,
        matched=1,
        corrected=0,
        escalated=1,
        unreachable=1,
        details=(line,),
    )
    store.finish_reconciliation(run, compared_ids=[], now=7.5)
    with pytest.raises(ConcurrencyError):
        store.finish_reconciliation(run, compared_ids=[], now=8.0)
    listed = store.reconciliations(limit=10)
    assert [r.run_id for r in listed] == [second, first]
    assert listed[0].finished_at is None
    assert listed[0].actor == "alice"
    assert listed[1] == dataclasses.replace(run, finished_at=7.5)
    assert [r.run_id for r in store.reconciliations(limit=1)] == [second]
