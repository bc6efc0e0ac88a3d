"""A transaction of typed writes over several instances (``store.apply``, and ``store.commit``
for a group holding transactions): owners' commits, fences from outside, deliveries, cancel
requests, starts and audit records, all or nothing, each write answered by the store. On both
backends, against the rows themselves."""

from __future__ import annotations

import dataclasses

import pytest

from ledger_records import (
    W2,
    claimed,
    commit_of,
    instance_write,
    new,
    started,
    step,
    step_write,
)
from ledgerflow.errors import FencedOutError, IllegalTransitionError, InstanceNotFoundError
from ledgerflow.ledger.audit import AuditEntry, AuditQuery
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import Commit, InstanceRecord, StartInstance
from ledgerflow.ledger.transaction import (
    AppendAudit,
    Audited,
    CancelAsked,
    Deliver,
    Delivered,
    FromOutside,
    RequestCancel,
    Started,
    Transaction,
)
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.step import StepStatus
from ledgerflow.storage.store import Store


def _entry(instance_id: InstanceId, kind: str) -> AuditEntry:
    # The outcome is the kernel's to decide for an Audited write; "pending" shows it did.
    return AuditEntry(
        actor="alice",
        role="operator",
        kind=kind,
        instance_id=instance_id,
        target=None,
        fingerprint=f"fp-{instance_id}-{kind}",
        outcome="pending",
        reason="test",
        evidence=None,
        plan="{}",
    )


def _signal(instance_id: InstanceId, event_id: str = "e-1", name: str = "approve") -> Deliver:
    return Deliver(instance_id=instance_id, event_id=event_id, name=name, payload="{}", sender=None)


def _begun(instance: InstanceRecord, seq: int, *, owner: WorkerId | None = None) -> Commit:
    """The owner's commit that starts step ``seq``."""
    return commit_of(
        instance, step_write(step(instance, seq, StepStatus.STARTED), StepStatus.NEW), owner=owner
    )


def _audited(store: Store, instance_id: InstanceId) -> list[tuple[str, str]]:
    return [(r.kind, r.outcome) for r in store.audit_records(AuditQuery(instance_id=instance_id))]


def test_changes_to_two_instances_and_their_audit_records_are_one_transaction(
    store: Store,
) -> None:
    a, b = started(store, "a"), started(store, "b")
    change = Transaction(
        fences=(FromOutside(instance_id=a.instance_id, live=True),),
        writes=(
            Audited(change=_signal(a.instance_id), entry=_entry(a.instance_id, "signal")),
            Audited(
                change=RequestCancel(instance_id=b.instance_id, reason="customer asked"),
                entry=_entry(b.instance_id, "cancel"),
            ),
        ),
    )
    delivered, asked = store.apply(change, now=5.0)
    assert isinstance(delivered, Delivered)
    assert delivered.new
    assert delivered.delivery.state is DeliveryState.PENDING
    assert isinstance(asked, CancelAsked)
    assert asked.new
    assert asked.instance.cancel_requested_at == 5.0
    assert _audited(store, a.instance_id) == [("signal", "applied")]
    assert _audited(store, b.instance_id) == [("cancel", "applied")]
    # The same transaction again: the store answers "a repeat" for each, and says so on the
    # record; nothing is delivered or requested twice.
    delivered, asked = store.apply(change, now=6.0)
    assert isinstance(delivered, Delivered)
    assert not delivered.new
    assert isinstance(asked, CancelAsked)
    assert not asked.new
    assert asked.instance.cancel_requested_at == 5.0
    assert [d.event_id for d in store.inbox(a.instance_id)] == ["e-1"]
    assert _audited(store, a.instance_id) == [("signal", "applied"), ("signal", "no-op")]
    assert _audited(store, b.instance_id) == [("cancel", "applied"), ("cancel", "no-op")]


def test_a_refused_write_leaves_nothing_of_the_writes_before_it(store: Store) -> None:
    a = started(store, "a")
    missing = InstanceId("wf-acme-order-missing")
    with pytest.raises(InstanceNotFoundError):
        store.apply(
            Transaction(
                writes=(
                    Audited(change=_signal(a.instance_id), entry=_entry(a.instance_id, "signal")),
                    AppendAudit(
                        entry=dataclasses.replace(_entry(a.instance_id, "start"), outcome="applied")
                    ),
                    _signal(missing),
                )
            ),
            now=5.0,
        )
    assert store.inbox(a.instance_id) == []
    assert _audited(store, a.instance_id) == []


def test_a_fence_from_outside_refuses_an_ended_instance(store: Store) -> None:
    ended = claimed(store, "ended")
    done = instance_write(
        status=InstanceStatus.SUCCEEDED, expected=InstanceStatus.RUNNING, release=True, result="{}"
    )
    [error] = store.commit([commit_of(ended, done)], now=2.0)
    assert error is None
    with pytest.raises(IllegalTransitionError, match="has ended"):
        store.apply(
            Transaction(
                fences=(FromOutside(instance_id=ended.instance_id, live=True),),
                writes=(
                    AppendAudit(
                        entry=dataclasses.replace(
                            _entry(ended.instance_id, "signal"), outcome="applied"
                        )
                    ),
                ),
            ),
            now=3.0,
        )
    assert _audited(store, ended.instance_id) == []
    with pytest.raises(InstanceNotFoundError):
        store.apply(Transaction(fences=(FromOutside(instance_id=InstanceId("wf-none")),)), now=3.0)


def test_an_event_kept_as_refused_is_recorded_as_refused(store: Store) -> None:
    a = started(store, "a")
    refusal = ("not-approver", "bob may not approve")
    [delivered] = store.apply(
        Transaction(
            writes=(
                Audited(
                    change=dataclasses.replace(_signal(a.instance_id), refuse=refusal),
                    entry=_entry(a.instance_id, "signal"),
                ),
            )
        ),
        now=5.0,
    )
    assert isinstance(delivered, Delivered)
    assert delivered.delivery.state is DeliveryState.REJECTED
    [record] = store.audit_records(AuditQuery(instance_id=a.instance_id))
    assert (record.outcome, record.refusal) == ("refused", "bob may not approve")


def test_a_parents_step_and_its_childs_start_commit_together(store: Store) -> None:
    """The worked example of the module: what a child workflow's start will write."""
    parent = claimed(store, "parent")
    child = new("parent/1", workflow="shipping")
    spawn = Transaction(
        commits=(_begun(parent, 1),),
        writes=(StartInstance(new=child),),
    )
    [answer] = store.apply(spawn, now=2.0)
    assert isinstance(answer, Started)
    assert answer.new
    assert answer.instance.business_key == "parent/1"
    assert store.journal(parent.instance_id, parent.run).steps[1].status is StepStatus.STARTED
    # A stale owner's copy of the same transaction starts nothing.
    stale = dataclasses.replace(parent, generation=parent.generation + 1)  # type: ignore[operator]
    orphan = new("parent/2", workflow="shipping")
    with pytest.raises(FencedOutError):
        store.apply(
            Transaction(
                commits=(_begun(stale, 2, owner=W2),),
                writes=(StartInstance(new=orphan),),
            ),
            now=3.0,
        )
    assert store.get_instance(orphan.instance_id) is None


def test_a_group_commit_refuses_a_transaction_alone(store: Store) -> None:
    """Group commit carries transactions as it carries commits: a refused one is rolled back
    alone, with every write it held to other instances, and the rest of the group lands."""
    first, second, third = (claimed(store, key) for key in ("first", "second", "third"))
    notified = started(store, "notified")
    stale = dataclasses.replace(second, generation=second.generation + 1)  # type: ignore[operator]
    results = store.commit(
        [
            _begun(first, 1),
            Transaction(
                commits=(_begun(stale, 1, owner=W2),),
                writes=(_signal(notified.instance_id, "from-second"),),
            ),
            Transaction(
                commits=(_begun(third, 1),),
                fences=(FromOutside(instance_id=notified.instance_id, live=True),),
                writes=(_signal(notified.instance_id, "from-third"),),
            ),
        ],
        now=2.0,
    )
    assert results[0] is None
    assert results[2] is None
    assert isinstance(results[1], FencedOutError)
    assert [d.event_id for d in store.inbox(notified.instance_id)] == ["from-third"]
    for landed in (first, third):
        assert store.journal(landed.instance_id, landed.run).steps[1].status is StepStatus.STARTED
    assert store.journal(second.instance_id, second.run).steps == {}
