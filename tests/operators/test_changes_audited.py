"""Every change from outside commits with its audit record, or neither does (the design's
invariant 7): a start, a signal and a cancel request, through the service (the CLI's path) and
through a principal (the HTTP API's and the console's), each dying between its change and its
record (``audit.before_record``). On SQLite and PostgreSQL.

The death is :class:`~ledgerflow.runtime.faults.SimulatedCrash`, which unwinds everything as a
process's end would (``tests/web/test_idempotency_processes.py`` kills real servers at the same
point). The oracle check :func:`ledgerflow.testing.oracle.changes_audited` must find the
violations when the change and its record are written in two transactions, as they were before
(the revert: the store's ``transaction()`` made a block that joins nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import repair_workflows as wf

from ledgerflow.model.authority import ApiRole, Principal
from ledgerflow.model.ids import InstanceId
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.runtime import faults
from ledgerflow.storage import open_store
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.testing import oracle

OPERATOR = Principal(name="olga", role=ApiRole.OPERATOR, tenant="default")

# kind -> the change through the service, and through a principal, on the instance `iid`.
Change = Callable[[Operations, str, str], Any]
CHANGES: dict[str, tuple[Change, Change]] = {
    "start": (
        lambda ops, iid, key: ops.start("pay", key=key, input={"amount": 2}, actor="alice"),
        lambda ops, iid, key: ops.acting_as(OPERATOR).start(
            "pay", key=key, input={"amount": 2}, version=None, tenant=None
        ),
    ),
    "signal": (
        lambda ops, iid, key: ops.signal(iid, "go", event_id="e-1", payload=1, actor="alice"),
        lambda ops, iid, key: ops.acting_as(OPERATOR).signal(
            iid, "go", event_id="e-1", payload=1, sender=None, for_step=None, run=None
        ),
    ),
    "cancel": (
        lambda ops, iid, key: ops.cancel(iid, reason="stop", actor="alice"),
        lambda ops, iid, key: ops.acting_as(OPERATOR).cancel(iid, reason="stop", compensate=True),
    ),
}


@contextlib.contextmanager
def _death_before_the_record(kind: str) -> Iterator[None]:
    rule = faults.FaultRule(point="audit.before_record", action="crash", match={"kind": kind})
    faults.install(faults.FaultPlan([rule]))
    try:
        with pytest.raises(faults.SimulatedCrash):
            yield
    finally:
        faults.install(None)


def _changes(journal_url: str, authority: Authority) -> list[oracle.Violation]:
    """Each change, through each face, dies before its record, then is made again; what the
    oracle finds on the journal after all of them."""
    with Operations(
        journal_url, registry=wf.registry, authority=authority, migrate=None
    ) as operations:
        for kind, faces in CHANGES.items():
            for face, change in zip(("service", "principal"), faces, strict=True):
                key = f"{kind}-{face}"
                iid = operations.start("pay", key=f"target-{key}", input={"amount": 1}).instance_id
                with _death_before_the_record(kind):
                    change(operations, iid, key)
                change(operations, iid, key)  # the retry, after the "restart"
    store = open_store(journal_url, migrate=False)
    try:
        return oracle.changes_audited(store)
    finally:
        store.close()


def test_a_death_between_a_change_and_its_record_leaves_neither(
    journal_url: str, authority: Authority
) -> None:
    """Goal: whichever face a change comes through, a death before its audit record is written
    leaves no trace of the change either; the retry makes both, once.

    Method: each change dies at ``audit.before_record``; the journal then holds no new
    instance, no event, no cancel request from it; the retry makes the change; the oracle
    finds every change on the record, and each record once."""
    assert _changes(journal_url, authority) == []
    store = open_store(journal_url, migrate=False)
    try:
        for face in ("service", "principal"):
            started = store.get_instance(InstanceId(_instance_of(store, f"start-{face}")))
            assert started is not None
            signalled = _instance_of(store, f"target-signal-{face}")
            assert [e.event_id for e in store.inbox(InstanceId(signalled))] == ["e-1"]
            cancelled = store.get_instance(InstanceId(_instance_of(store, f"target-cancel-{face}")))
            assert cancelled is not None
            assert cancelled.cancel_reason == "stop"
        records = store.audit_records(AuditQuery(actor=OPERATOR.name, limit=500))
        outcomes = [(r.kind, r.outcome) for r in records]
        # The principal's three changes, each once (the deaths left no record of their own).
        assert sorted(outcomes) == [
            ("cancel", "applied"),
            ("signal", "applied"),
            ("start", "applied"),
        ]
    finally:
        store.close()


def _instance_of(store: Any, key: str) -> str:
    [found] = [i for i in store.list_instances(limit=100) if i.business_key == key]
    return str(found.instance_id)


def test_the_oracle_finds_changes_recorded_in_a_transaction_of_their_own(
    journal_url: str, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: the check can fail: with the change and its record in two transactions (the
    store's ``transaction()`` reverted to a block that joins nothing), each death leaves a
    change with no record, and the oracle names every one."""
    monkeypatch.setattr(SqlStore, "transaction", lambda self: contextlib.nullcontext())
    found = _changes(journal_url, authority)
    details = sorted(v.detail for v in found)
    assert details == sorted(
        ["started with no audit record"] * 2
        + ["event 'e-1' (go) kept with no audit record"] * 2
        + ["a cancel request with no audit record"] * 2
    ), found
