"""The storage contract: what every store must do, whatever database is underneath.

Every test takes the ``store`` fixture (``conftest.py``), a fresh journal on SQLite and on
PostgreSQL, and builds its rows with ``ledger_records``. Times are passed in explicitly
(``now``), so leases expire by arithmetic, never by sleeping.
"""

from __future__ import annotations

import dataclasses

import pytest

from ledger_records import (
    LEASE,
    W1,
    W2,
    claimed,
    commit_of,
    commit_one,
    effect,
    effect_write,
    instance_write,
    new,
    started,
    step,
    step_write,
)
from ledgerflow.errors import (
    ConcurrencyError,
    FencedOutError,
    IllegalTransitionError,
    LedgerflowError,
)
from ledgerflow.ledger.records import (
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    Journal,
    Release,
    StepWrite,
    TimelineEntry,
    Write,
)
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import (
    Generation,
    InstanceId,
    RunNumber,
    StepSeq,
    TenantId,
)
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.step import StepStatus
from ledgerflow.storage.store import Store


def snapshot(
    store: Store, instance: InstanceRecord
) -> tuple[InstanceRecord | None, Journal, list[EffectRecord], list[TimelineEntry]]:
    """Everything a refused commit must leave as it was."""
    return (
        store.get_instance(instance.instance_id),
        store.journal(instance.instance_id, RunNumber(1)),
        store.effects(instance.instance_id),
        store.timeline(instance.instance_id),
    )


# -- starting ---------------------------------------------------------------------------------


def test_start_is_idempotent_by_business_key(store: Store) -> None:
    """Goal: starting one business key twice returns the same instance, created once.

    Method: start a key, start it again (even with another proposed instance id): the second
    call reports created False, returns the first id and leaves one 'started' event.
    """
    first, created = store.start_instance(new("k1"), now=1.0)
    assert created
    assert first.status is InstanceStatus.RUNNING
    assert first.generation == 0
    assert first.owner is None
    again = dataclasses.replace(new("k1"), instance_id=InstanceId("other"))
    second, created_again = store.start_instance(again, now=2.0)
    assert not created_again
    assert second.instance_id == first.instance_id
    assert second == first
    assert [e.to_state for e in store.timeline(first.instance_id)] == ["RUNNING"]


def test_business_keys_are_scoped_by_tenant_and_workflow(store: Store) -> None:
    """Goal: one key in two tenants (or two workflows) names two outcomes.

    Method: start the same key under another tenant and another workflow; all are created.
    """
    ids = set()
    for instance in (new("k"), new("k", tenant="other"), new("k", workflow="refund")):
        record, created = store.start_instance(instance, now=1.0)
        assert created
        ids.add(record.instance_id)
    assert len(ids) == 3


def test_instance_id_taken_by_another_key_is_refused(store: Store) -> None:
    """Goal: a start whose instance id is already used by another business key is refused with
    a Ledgerflow error, and the existing instance is untouched.

    Method: start key k1, then key k2 proposing k1's instance id.
    """
    first, _ = store.start_instance(new("k1"), now=1.0)
    clash = dataclasses.replace(new("k2"), instance_id=first.instance_id)
    with pytest.raises(LedgerflowError):
        store.start_instance(clash, now=2.0)
    assert store.get_instance(first.instance_id) == first
    assert (
        store.find_instance(tenant=TenantId("acme"), workflow_name="order", business_key="k2")
        is None
    )


# -- claims and leases ------------------------------------------------------------------------


def test_claim_fences_with_increasing_generations(store: Store) -> None:
    """Goal: each claim hands out a strictly higher generation; a lapsed lease can be taken over.

    Method: worker 1 claims at t=1 (generation 1, lease to t=11). Worker 2 claims after the
    lease expired (t=12) and gets generation 2; each claim leaves an owner event.
    """
    record = started(store, "k")
    [first] = store.claim(owner=W1, now=1.0, lease_seconds=LEASE, limit=10)
    assert first.instance_id == record.instance_id
    assert first.owner == W1
    assert first.generation == 1
    assert first.lease_expires_at == 1.0 + LEASE
    [second] = store.claim(owner=W2, now=1.0 + LEASE + 1, lease_seconds=LEASE, limit=10)
    assert second.owner == W2
    assert second.generation == 2
    owners = [
        (e.generation, e.to_state)
        for e in store.timeline(record.instance_id)
        if e.subject == "owner"
    ]
    assert owners == [(1, W1), (2, W2)]


def test_live_lease_is_never_handed_to_a_second_owner(store: Store) -> None:
    """Goal: while a lease is live nobody else gets the instance, not even its own owner again.

    Method: worker 1 claims at t=1; claims by worker 2 and worker 1 at many times before the
    lease ends return nothing; after a renewal at t=9 the lease runs to t=19 and the same holds.
    """
    record = started(store, "k")
    [mine] = store.claim(owner=W1, now=1.0, lease_seconds=LEASE, limit=10)
    for now in (1.0, 2.5, 5.0, 10.9):
        assert store.claim(owner=W2, now=now, lease_seconds=LEASE, limit=10) == []
        assert store.claim(owner=W1, now=now, lease_seconds=LEASE, limit=10) == []
    assert (
        store.renew(
            owner=W1, leases=[(mine.instance_id, mine.generation)], now=9.0, lease_seconds=LEASE
        )
        == []
    )
    for now in (11.5, 15.0, 18.9):
        assert store.claim(owner=W2, now=now, lease_seconds=LEASE, limit=10) == []
    after = store.get_instance(record.instance_id)
    assert after is not None
    assert after.owner == W1
    assert after.generation == 1
    assert after.lease_expires_at == 9.0 + LEASE


def test_claim_respects_limit_due_time_and_order(store: Store) -> None:
    """Goal: a claim takes at most ``limit`` instances, only due ones, earliest first.

    Method: start three instances at t=0, 1, 2; claim one at a time with long leases (earliest
    first), release the second until t=100: a claim at t=50 gets only the third, one at t=100
    gets the second.
    """
    a = started(store, "a", now=0.0)
    b = started(store, "b", now=1.0)
    c = started(store, "c", now=2.0)
    [first] = store.claim(owner=W1, now=5.0, lease_seconds=1000.0, limit=1)
    assert first.instance_id == a.instance_id
    [second] = store.claim(owner=W1, now=5.0, lease_seconds=1000.0, limit=1)
    assert second.instance_id == b.instance_id
    assert commit_one(store, commit_of(second, Release(available_at=100.0)), now=6.0) is None
    got = store.claim(owner=W2, now=50.0, lease_seconds=1000.0, limit=10)
    assert [r.instance_id for r in got] == [c.instance_id]
    assert store.claim(owner=W2, now=99.0, lease_seconds=LEASE, limit=10) == []
    got = store.claim(owner=W2, now=100.0, lease_seconds=LEASE, limit=10)
    assert [r.instance_id for r in got] == [b.instance_id]


def test_renew_reports_lost_leases(store: Store) -> None:
    """Goal: a worker learns which instances it no longer holds when it renews.

    Method: worker 1 holds two instances until t=11 and renews only "kept" (to t=20.5); at t=20
    worker 2 takes over "lost". Renewing both reports exactly "lost"; a renewal naming a wrong
    generation is lost too; the kept lease is extended.
    """
    kept = claimed(store, "kept")
    lost = claimed(store, "lost")
    kept_lease = [(kept.instance_id, kept.generation)]
    assert store.renew(owner=W1, leases=kept_lease, now=10.5, lease_seconds=LEASE) == []
    [taken] = store.claim(owner=W2, now=20.0, lease_seconds=LEASE, limit=10)
    assert taken.instance_id == lost.instance_id
    assert taken.generation == lost.generation + 1
    both = [*kept_lease, (lost.instance_id, lost.generation)]
    assert store.renew(owner=W1, leases=both, now=20.1, lease_seconds=LEASE) == [lost.instance_id]
    wrong = [(taken.instance_id, Generation(taken.generation + 5))]
    assert store.renew(owner=W2, leases=wrong, now=20.2, lease_seconds=LEASE) == [taken.instance_id]
    renewed = store.get_instance(kept.instance_id)
    assert renewed is not None
    assert renewed.owner == W1
    assert renewed.lease_expires_at == 20.1 + LEASE


def test_renew_keeps_a_held_lease_and_loses_a_released_one(store: Store) -> None:
    """Goal: renewal succeeds exactly while the owner holds the generation.

    Method: renew a held lease (nothing lost), release it, renew again (lost).
    """
    mine = claimed(store, "k")
    leases = [(mine.instance_id, mine.generation)]
    assert store.renew(owner=W1, leases=leases, now=5.0, lease_seconds=LEASE) == []
    assert commit_one(store, commit_of(mine, Release(available_at=6.0)), now=6.0) is None
    assert store.renew(owner=W1, leases=leases, now=7.0, lease_seconds=LEASE) == [mine.instance_id]


# -- fenced commits ---------------------------------------------------------------------------


def test_stale_generation_is_fenced_out_and_changes_nothing(store: Store) -> None:
    """Goal: invariant 5: a write from a stale owner changes nothing.

    Method: worker 1 claims (generation 1), its lease lapses and worker 2 claims (generation
    2). Worker 1's commit of a step, an effect and a status change returns FencedOutError
    (LF301) naming the instance; instance, journal, effects and events are untouched.
    """
    old = claimed(store, "k")
    [new_owner] = store.claim(owner=W2, now=30.0, lease_seconds=LEASE, limit=10)
    before = snapshot(store, old)
    result = commit_one(
        store,
        commit_of(
            old,
            step_write(step(old, 1, StepStatus.STARTED), StepStatus.NEW),
            effect_write(effect(old, 1, EffectState.INTENDED), EffectState.NEW),
            instance_write(
                status=InstanceStatus.FAILED, expected=InstanceStatus.RUNNING, release=True
            ),
        ),
        now=31.0,
    )
    assert isinstance(result, FencedOutError)
    assert result.code == "LF301"
    assert result.instance_id == old.instance_id
    assert snapshot(store, old) == before
    assert new_owner.generation == 2


def test_other_owner_with_current_generation_is_fenced_out(store: Store) -> None:
    """Goal: the fence is owner and generation together, not the generation alone.

    Method: worker 2 commits with worker 1's current generation; it is refused, nothing changes.
    """
    mine = claimed(store, "k")
    before = snapshot(store, mine)
    write = step_write(step(mine, 1, StepStatus.STARTED), StepStatus.NEW)
    result = commit_one(store, commit_of(mine, write, owner=W2))
    assert isinstance(result, FencedOutError)
    assert snapshot(store, mine) == before


def test_released_owner_can_no_longer_write(store: Store) -> None:
    """Goal: giving up a lease gives up the right to write.

    Method: release, then commit a step with the same owner and generation: FencedOutError.
    """
    mine = claimed(store, "k")
    assert commit_one(store, commit_of(mine, Release(available_at=3.0))) is None
    write = step_write(step(mine, 1, StepStatus.STARTED), StepStatus.NEW)
    assert isinstance(commit_one(store, commit_of(mine, write), now=4.0), FencedOutError)


def test_refused_commit_rolls_back_alone_in_its_batch(store: Store) -> None:
    """Goal: each commit of a batch is all or nothing, and one refusal does not sink the others.

    Method: A has step 1 STARTED. A batch holds a good commit for B, then A's commit (a valid
    effect intent followed by a step write expecting RETRY_SCHEDULED while the row is STARTED),
    then a good commit for C. Results are [None, IllegalTransitionError, None]; A is exactly as
    before (no effect row, step still STARTED, no new event); B and C have their steps.
    """
    a, b, c = claimed(store, "a"), claimed(store, "b"), claimed(store, "c")
    first = step_write(step(a, 1, StepStatus.STARTED), StepStatus.NEW)
    assert commit_one(store, commit_of(a, first)) is None
    before = snapshot(store, a)
    bad = commit_of(
        a,
        effect_write(effect(a, 2, EffectState.INTENDED), EffectState.NEW),
        step_write(
            step(a, 1, StepStatus.COMPLETED, output="1"),
            expected=StepStatus.RETRY_SCHEDULED,
        ),
    )
    good_b = commit_of(b, step_write(step(b, 1, StepStatus.STARTED), StepStatus.NEW))
    good_c = commit_of(c, step_write(step(c, 1, StepStatus.STARTED), StepStatus.NEW))
    results = store.commit([good_b, bad, good_c], now=3.0)
    assert results[0] is None
    assert isinstance(results[1], IllegalTransitionError)
    assert results[2] is None
    assert snapshot(store, a) == before
    for other in (b, c):
        assert (
            store.journal(other.instance_id, RunNumber(1)).steps[StepSeq(1)].status
            is StepStatus.STARTED
        )


def test_stale_commit_in_a_batch_is_fenced_alone(store: Store) -> None:
    """Goal: a group's fences (one statement for all of them) refuse only the stale commit.

    Method: B lets its instance go; then a batch holds new-step commits for A, B (now stale) and
    C. Results are [None, FencedOutError, None]; B is exactly as it was after its release; A and
    C have their step, and their timelines end with its event, in the order written.
    """
    a, b, c = claimed(store, "a"), claimed(store, "b"), claimed(store, "c")
    assert commit_one(store, commit_of(b, Release(available_at=3.0))) is None
    before = snapshot(store, b)
    commits = [
        commit_of(x, step_write(step(x, 1, StepStatus.STARTED), StepStatus.NEW)) for x in (a, b, c)
    ]
    results = store.commit(commits, now=3.0)
    assert results[0] is None
    assert isinstance(results[1], FencedOutError)
    assert results[2] is None
    assert snapshot(store, b) == before
    for good in (a, c):
        steps = store.journal(good.instance_id, RunNumber(1)).steps
        assert steps[StepSeq(1)].status is StepStatus.STARTED
        last = store.timeline(good.instance_id)[-1]
        assert (last.subject, last.from_state, last.to_state) == ("step:1", "NEW", "STARTED")


def test_journals_reads_many_runs_keyed_as_asked(store: Store) -> None:
    """Goal: one read of many journals gives each run exactly what ``journal`` gives alone.

    Method: A has steps 1 and 2, B step 1, C none; ``journals`` for (A, 1), (B, 1), (C, 1) and
    (A, 2) (a run that never happened) equals the single reads, with empty journals where
    nothing was written.
    """
    a, b, c = claimed(store, "a"), claimed(store, "b"), claimed(store, "c")
    for instance, seqs in ((a, (1, 2)), (b, (1,))):
        writes = [
            step_write(
                step(instance, s, StepStatus.COMPLETED, output=str(s)),
                expected=StepStatus.NEW,
            )
            for s in seqs
        ]
        assert commit_one(store, commit_of(instance, *writes)) is None
    wanted = [
        (a.instance_id, RunNumber(1)),
        (b.instance_id, RunNumber(1)),
        (c.instance_id, RunNumber(1)),
        (a.instance_id, RunNumber(2)),
    ]
    found = store.journals(wanted)
    assert list(found) == wanted
    for instance_id, run in wanted:
        assert found[instance_id, run] == store.journal(instance_id, run)
    assert sorted(found[a.instance_id, RunNumber(1)].steps) == [StepSeq(1), StepSeq(2)]
    assert sorted(found[b.instance_id, RunNumber(1)].steps) == [StepSeq(1)]
    assert found[c.instance_id, RunNumber(1)] == Journal(steps={}, effects={})
    assert found[a.instance_id, RunNumber(2)] == Journal(steps={}, effects={})


def test_step_write_outside_the_machine_is_refused(store: Store) -> None:
    """Goal: a step can only move along the step machine.

    Method: COMPLETED step, then a write COMPLETED -> STARTED: IllegalTransitionError, unchanged.
    """
    mine = claimed(store, "k")
    done = step_write(step(mine, 1, StepStatus.COMPLETED, output="1"), StepStatus.NEW)
    assert commit_one(store, commit_of(mine, done)) is None
    before = snapshot(store, mine)
    back = step_write(step(mine, 1, StepStatus.STARTED), StepStatus.COMPLETED)
    assert isinstance(commit_one(store, commit_of(mine, back)), IllegalTransitionError)
    assert snapshot(store, mine) == before


def test_second_insert_of_a_step_is_refused(store: Store) -> None:
    """Goal: a journal position is written once; a second 'NEW' write for it is a conflict.

    Method: insert step 1 twice; the second commit is refused and the first row stays.
    """
    mine = claimed(store, "k")
    write = step_write(step(mine, 1, StepStatus.STARTED), StepStatus.NEW)
    assert commit_one(store, commit_of(mine, write)) is None
    before = snapshot(store, mine)
    again = step_write(step(mine, 1, StepStatus.COMPLETED, output="1"), StepStatus.NEW)
    assert isinstance(commit_one(store, commit_of(mine, again)), LedgerflowError)
    assert snapshot(store, mine) == before


@pytest.mark.parametrize(
    ("stored", "expected", "target"),
    [
        (EffectState.CONFIRMED, EffectState.CONFIRMED, EffectState.INTENDED),
        (EffectState.FAILED, EffectState.FAILED, EffectState.INTENDED),
        (EffectState.INTENDED, EffectState.NEW, EffectState.CONFIRMED),
        (EffectState.CONFIRMED, EffectState.UNKNOWN, EffectState.CONFIRMED),
        (EffectState.CONFIRMED, EffectState.INTENDED, EffectState.UNKNOWN),
    ],
    ids=[
        "confirmed-to-intended",
        "failed-to-intended",
        "new-to-confirmed",
        "expects-unknown",
        "expects-intended",
    ],
)
def test_effect_write_outside_the_machine_or_the_row_is_refused(
    store: Store, stored: EffectState, expected: EffectState, target: EffectState
) -> None:
    """Goal: an effect only moves along the effect machine, from the state it is really in.

    Method: bring effect 1 to ``stored``, then commit ``expected -> target`` (either not an
    edge of the machine, or an edge from a state the row is no longer in): it is refused with
    IllegalTransitionError and nothing changes.
    """
    mine = claimed(store, "k")
    writes: list[Write] = [effect_write(effect(mine, 1, EffectState.INTENDED), EffectState.NEW)]
    if stored is not EffectState.INTENDED:
        evidence = '{"ok": true}' if stored is EffectState.CONFIRMED else None
        writes.append(
            effect_write(effect(mine, 1, stored, evidence=evidence), EffectState.INTENDED)
        )
    assert commit_one(store, commit_of(mine, *writes)) is None
    before = snapshot(store, mine)
    evidence = '{"ok": true}' if target is EffectState.CONFIRMED else None
    move = effect_write(effect(mine, 1, target, evidence=evidence), expected)
    result = commit_one(store, commit_of(mine, move))
    assert isinstance(result, IllegalTransitionError)
    assert result.machine == "effect"
    assert snapshot(store, mine) == before


def test_duplicate_idempotency_key_is_refused(store: Store) -> None:
    """Goal: one key, one effect, forever (invariant 1 at the ledger level).

    Method: intend effect 1 of A under key K; intending effect 2 of A, or effect 1 of another
    instance B, under K is refused (a ConcurrencyError) and leaves no second row.
    """
    a, b = claimed(store, "a"), claimed(store, "b")
    intent = effect_write(effect(a, 1, EffectState.INTENDED, key="K"), EffectState.NEW)
    assert commit_one(store, commit_of(a, intent)) is None
    before_a, before_b = snapshot(store, a), snapshot(store, b)
    same_instance = effect_write(effect(a, 2, EffectState.INTENDED, key="K"), EffectState.NEW)
    other_instance = effect_write(effect(b, 1, EffectState.INTENDED, key="K"), EffectState.NEW)
    results = store.commit([commit_of(a, same_instance), commit_of(b, other_instance)], now=3.0)
    assert all(isinstance(r, ConcurrencyError) for r in results)
    assert (snapshot(store, a), snapshot(store, b)) == (before_a, before_b)


def test_idempotency_key_cannot_be_changed_after_the_intent(store: Store) -> None:
    """Goal: the key an effect was intended under is the key it keeps (never a fresh key).

    Method: intend under K1, then commit INTENDED -> CONFIRMED carrying key K2: refused.
    """
    mine = claimed(store, "k")
    intent = effect_write(effect(mine, 1, EffectState.INTENDED, key="K1"), EffectState.NEW)
    assert commit_one(store, commit_of(mine, intent)) is None
    before = snapshot(store, mine)
    rekeyed = effect(mine, 1, EffectState.CONFIRMED, key="K2", evidence="{}")
    result = commit_one(store, commit_of(mine, effect_write(rekeyed, EffectState.INTENDED)))
    assert isinstance(result, IllegalTransitionError)
    assert snapshot(store, mine) == before


def test_instance_write_outside_the_machine_or_from_a_stale_status_is_refused(store: Store) -> None:
    """Goal: the instance status only moves along the instance machine, from its real status.

    Method: RUNNING -> COMPENSATED (no such edge) and WAITING -> RUNNING while RUNNING (stale
    expectation) are both refused with IllegalTransitionError; nothing changes.
    """
    mine = claimed(store, "k")
    before = snapshot(store, mine)
    for status, expected in (
        (InstanceStatus.COMPENSATED, InstanceStatus.RUNNING),
        (InstanceStatus.RUNNING, InstanceStatus.WAITING),
    ):
        write = instance_write(status=status, expected=expected)
        result = commit_one(store, commit_of(mine, write))
        assert isinstance(result, IllegalTransitionError)
        assert result.machine == "instance"
        assert snapshot(store, mine) == before


# -- events -----------------------------------------------------------------------------------


def _writes_for(mine: InstanceRecord) -> dict[str, tuple[list[Write], Write]]:
    """Per write kind: the writes that prepare it, and the write itself."""
    intent = effect_write(effect(mine, 1, EffectState.INTENDED), EffectState.NEW)
    return {
        "step-insert": (
            [],
            step_write(step(mine, 1, StepStatus.STARTED), StepStatus.NEW),
        ),
        "step-update": (
            [step_write(step(mine, 1, StepStatus.STARTED), StepStatus.NEW)],
            step_write(
                step(mine, 1, StepStatus.RETRY_SCHEDULED, attempt=2, next_attempt_at=9.0),
                expected=StepStatus.STARTED,
            ),
        ),
        "effect-insert": ([], intent),
        "effect-update": (
            [intent],
            effect_write(effect(mine, 1, EffectState.UNKNOWN), EffectState.INTENDED),
        ),
        "instance": (
            [],
            instance_write(status=InstanceStatus.CANCELLING, expected=InstanceStatus.RUNNING),
        ),
        "release": ([], Release(available_at=50.0)),
    }


@pytest.mark.parametrize(
    "kind", ["step-insert", "step-update", "effect-insert", "effect-update", "instance", "release"]
)
def test_every_successful_write_leaves_an_event(store: Store, kind: str) -> None:
    """Goal: the timeline records every change, in the same transaction as the change.

    Method: after preparing writes, commit one write of the given kind alone; exactly one new
    event row appears for the instance, carrying the commit's generation and time.
    """
    mine = claimed(store, "k")
    preparing, write = _writes_for(mine)[kind]
    if preparing:
        assert commit_one(store, commit_of(mine, *preparing)) is None
    before = store.timeline(mine.instance_id)
    assert commit_one(store, commit_of(mine, write), now=7.0) is None
    added = store.timeline(mine.instance_id)[len(before) :]
    assert len(added) == 1
    assert added[0].generation == mine.generation
    assert added[0].at == 7.0
    if isinstance(write, StepWrite):
        assert (added[0].subject, added[0].to_state) == ("step:1", write.record.status.value)
        assert added[0].from_state == write.expected.value
    if isinstance(write, EffectWrite):
        assert (added[0].subject, added[0].to_state) == ("effect:1", write.record.state.value)
        assert added[0].from_state == write.expected.value
    if isinstance(write, InstanceWrite):
        assert (added[0].subject, added[0].from_state, added[0].to_state) == (
            "instance",
            "RUNNING",
            "CANCELLING",
        )


# -- terminal writes --------------------------------------------------------------------------


def test_succeeding_with_release_clears_the_owner(store: Store) -> None:
    """Goal: a terminal status is written together with the end of ownership.

    Method: commit RUNNING -> SUCCEEDED with a result and ``release``; the instance is
    SUCCEEDED, unowned, holds its result, is never claimed again, and renewing reports it lost.
    """
    mine = claimed(store, "k")
    write = instance_write(
        status=InstanceStatus.SUCCEEDED,
        expected=InstanceStatus.RUNNING,
        result='{"ok":1}',
        release=True,
    )
    assert commit_one(store, commit_of(mine, write), now=3.0) is None
    done = store.get_instance(mine.instance_id)
    assert done is not None
    assert done.status is InstanceStatus.SUCCEEDED
    assert done.owner is None
    assert done.lease_expires_at is None
    assert done.result == '{"ok":1}'
    assert done.generation == mine.generation
    assert store.claim(owner=W2, now=1000.0, lease_seconds=LEASE, limit=10) == []
    assert store.renew(
        owner=W1, leases=[(mine.instance_id, mine.generation)], now=4.0, lease_seconds=LEASE
    ) == [mine.instance_id]


def _unreadable_writes(mine: InstanceRecord) -> dict[str, tuple[Write, ...]]:
    intent = effect_write(effect(mine, 1, EffectState.INTENDED), EffectState.NEW)
    return {
        "terminal-still-owned": (
            instance_write(
                status=InstanceStatus.SUCCEEDED, expected=InstanceStatus.RUNNING, result="1"
            ),
        ),
        "succeeded-without-result": (
            instance_write(
                status=InstanceStatus.SUCCEEDED, expected=InstanceStatus.RUNNING, release=True
            ),
        ),
        "step-completed-without-output": (
            step_write(step(mine, 1, StepStatus.COMPLETED), StepStatus.NEW),
        ),
        "step-retry-without-due-time": (
            step_write(
                step(mine, 1, StepStatus.RETRY_SCHEDULED, attempt=2),
                expected=StepStatus.NEW,
            ),
        ),
        "step-attempt-zero": (
            step_write(step(mine, 1, StepStatus.STARTED, attempt=0), StepStatus.NEW),
        ),
        "effect-attempt-zero": (
            effect_write(effect(mine, 1, EffectState.INTENDED, attempt=0), EffectState.NEW),
        ),
        "effect-confirmed-without-evidence": (
            intent,
            effect_write(effect(mine, 1, EffectState.CONFIRMED), EffectState.INTENDED),
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "terminal-still-owned",
        "succeeded-without-result",
        "step-completed-without-output",
        "step-retry-without-due-time",
        "step-attempt-zero",
        "effect-attempt-zero",
        "effect-confirmed-without-evidence",
    ],
)
def test_a_row_every_read_would_refuse_is_never_written(store: Store, case: str) -> None:
    """Goal: invariants are asserted before each write, not only after each read, so the store
    never writes a row it would then report as corrupt (which would make the instance, and every
    listing that includes it, unreadable).

    Method: commit writes that would break a read invariant (a terminal instance still owned,
    SUCCEEDED without a result, a COMPLETED step without output, a CONFIRMED effect without
    evidence, ...); the commit is refused with a Ledgerflow error and the instance and its
    journal still read as before.
    """
    mine = claimed(store, "k")
    before = snapshot(store, mine)
    result = commit_one(store, commit_of(mine, *_unreadable_writes(mine)[case]))
    assert isinstance(result, LedgerflowError)
    assert snapshot(store, mine) == before
    assert [r.instance_id for r in store.list_instances()] == [mine.instance_id]


# -- reading ----------------------------------------------------------------------------------


def test_list_filters_orders_and_limits(store: Store) -> None:
    """Goal: listing is newest first and filters by status, workflow and tenant.

    Method: start four instances at increasing times across tenants and workflows, finish one;
    list with each filter and a limit.
    """
    a, _ = store.start_instance(new("a"), now=1.0)
    b, _ = store.start_instance(new("b", tenant="other"), now=2.0)
    c, _ = store.start_instance(new("c", workflow="refund"), now=3.0)
    d, _ = store.start_instance(new("d"), now=4.0)
    [held] = store.claim(owner=W1, now=5.0, lease_seconds=LEASE, limit=1)
    assert held.instance_id == a.instance_id
    done = instance_write(
        status=InstanceStatus.FAILED, expected=InstanceStatus.RUNNING, release=True
    )
    assert commit_one(store, commit_of(held, done), now=6.0) is None

    def ids(records: list[InstanceRecord]) -> list[InstanceId]:
        return [r.instance_id for r in records]

    assert ids(store.list_instances()) == [
        d.instance_id,
        c.instance_id,
        b.instance_id,
        a.instance_id,
    ]
    assert ids(store.list_instances(limit=2)) == [d.instance_id, c.instance_id]
    assert ids(store.list_instances(status=InstanceStatus.FAILED)) == [a.instance_id]
    assert ids(store.list_instances(workflow_name="refund")) == [c.instance_id]
    assert ids(store.list_instances(tenant=TenantId("other"))) == [b.instance_id]
    assert ids(store.list_instances(tenant=TenantId("acme"), status=InstanceStatus.RUNNING)) == [
        d.instance_id,
        c.instance_id,
    ]
    assert (
        store.find_instance(tenant=TenantId("acme"), workflow_name="order", business_key="d") == d
    )
    assert (
        store.find_instance(tenant=TenantId("acme"), workflow_name="order", business_key="zz")
        is None
    )
    assert store.get_instance(InstanceId("missing")) is None


def test_count_by_status(store: Store) -> None:
    """Goal: the per-status counts operators watch are exact and omit empty statuses.

    Method: empty store -> {}; three instances, one moved to CANCELLING -> {RUNNING: 2,
    CANCELLING: 1}.
    """
    assert store.count_by_status() == {}
    mine = claimed(store, "a")
    started(store, "b")
    started(store, "c")
    cancel = instance_write(status=InstanceStatus.CANCELLING, expected=InstanceStatus.RUNNING)
    assert commit_one(store, commit_of(mine, cancel)) is None
    assert store.count_by_status() == {InstanceStatus.RUNNING: 2, InstanceStatus.CANCELLING: 1}


def test_next_available_at(store: Store) -> None:
    """Goal: an idle worker learns when the next runnable instance becomes claimable.

    Method: None for an empty store; for a held instance its lease expiry; a released-until
    time; the due time of a new unowned instance; the earliest over several; None once
    everything is terminal.
    """
    assert store.next_available_at() is None
    mine = claimed(store, "k", now=1.0)  # started at t=0, held until t=11
    assert store.next_available_at() == 1.0 + LEASE
    assert commit_one(store, commit_of(mine, Release(available_at=42.0)), now=2.0) is None
    assert store.next_available_at() == 42.0
    other = started(store, "other", now=30.0)
    assert store.next_available_at() == 30.0
    [held] = store.claim(owner=W1, now=31.0, lease_seconds=LEASE, limit=1)
    assert held.instance_id == other.instance_id
    assert store.next_available_at() == 31.0 + LEASE  # held until 41, before the 42 release
    finish = instance_write(
        status=InstanceStatus.FAILED, expected=InstanceStatus.RUNNING, release=True
    )
    assert commit_one(store, commit_of(held, finish), now=32.0) is None
    assert store.next_available_at() == 42.0
    [again] = store.claim(owner=W1, now=42.0, lease_seconds=LEASE, limit=1)
    assert commit_one(store, commit_of(again, finish), now=43.0) is None
    assert store.next_available_at() is None


def test_journal_and_effects_read_back_what_was_written(store: Store) -> None:
    """Goal: the journal returns, per step, exactly the records last written.

    Method: write a completed step and a confirmed effect, read the journal and the effect list;
    fields match the writes (with the commit's generation and time).
    """
    mine = claimed(store, "k")
    done = step(mine, 1, StepStatus.COMPLETED, output='"x"')
    intent = effect(mine, 2, EffectState.INTENDED)
    confirmed = effect(mine, 2, EffectState.CONFIRMED, evidence='{"r": 1}')
    writes = (
        step_write(done, StepStatus.NEW),
        effect_write(intent, EffectState.NEW),
        effect_write(confirmed, EffectState.INTENDED),
    )
    assert commit_one(store, commit_of(mine, *writes), now=5.0) is None
    journal = store.journal(mine.instance_id, RunNumber(1))
    assert journal.steps == {StepSeq(1): dataclasses.replace(done, updated_at=5.0)}
    assert journal.effects == {StepSeq(2): dataclasses.replace(confirmed, updated_at=5.0)}
    assert store.effects(mine.instance_id) == [dataclasses.replace(confirmed, updated_at=5.0)]
    assert store.journal(mine.instance_id, RunNumber(2)).steps == {}
