"""Two cancels of one instance at once: the first is ``applied``, the second a ``no-op``, on
the audit log as on the instance (issue 22, item B). On SQLite and PostgreSQL.

Only the store can say which request was first: it records a request only where none stands,
in the request's own transaction. These tests commit a rival request between everything the
losing caller read and its own request (deterministically), and race two callers for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import repair_workflows as wf

from ledgerflow.model.authority import ApiRole, Principal
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store

RACES = 12


class RivalFirst:
    """The journal's real store, except that just before the transaction that carries the
    cancel request (with its audit record) begins, ``rival`` runs: another connection commits
    its own request, after everything this caller read and before its request is written.
    (Inside that transaction nobody else can write on SQLite, and on PostgreSQL the request's
    row lock orders the two.)"""

    def __init__(self, store: Store, rival: Callable[[], object]) -> None:
        self._store = store
        self._rival: Callable[[], object] | None = rival

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def transaction(self) -> Any:
        if self._rival is not None:
            rival, self._rival = self._rival, None
            rival()
        return self._store.transaction()


def _started(url: str, key: str) -> str:
    with Operations(url, registry=wf.registry, migrate=None) as operations:
        return operations.start("pay", key=key, input={"amount": 1}, actor="test").instance_id


def _cancels(url: str, instance_id: str) -> list[tuple[str, str, str]]:
    """(actor, outcome, reason) of the instance's cancel records, oldest first."""
    with Operations(url) as operations:
        records = operations.audit(AuditQuery(instance_id=instance_id, kind="cancel"))
    return [(r.actor, r.outcome, r.reason) for r in records]


def test_a_cancel_committed_between_the_read_and_the_request_makes_the_second_a_no_op(
    journal_url: str, authority: Authority
) -> None:
    """Goal: when a rival's cancel commits after this caller read the instance and before its
    own request, the rival's is applied and this one is a no-op, on the record as on the
    instance (the first reason is kept), through the service and through a principal.

    Method: a cancel through the service (the CLI's path) and one through an operator
    principal (the HTTP API's and the console's path), each on a store that lets a rival on
    another connection commit its request first; the audit log holds the rival's as applied
    and this one as a no-op, and the answer names the rival's reason.
    """
    for face in ("service", "principal"):
        instance_id = _started(journal_url, f"race-{face}")
        with Operations(journal_url, authority=authority) as rival:

            def commit_rival(rival: Operations = rival, instance_id: str = instance_id) -> object:
                return rival.cancel(instance_id, reason="first", actor="alice")

            store = RivalFirst(open_store(journal_url, migrate=False), commit_rival)
            with Operations(store, authority=authority) as operations:  # type: ignore[arg-type]
                if face == "service":
                    record = operations.cancel(instance_id, reason="second", actor="bob")
                else:
                    principal = Principal(name="bob", role=ApiRole.OPERATOR, tenant="default")
                    scoped = operations.acting_as(principal)
                    record = scoped.cancel(instance_id, reason="second", compensate=True)
        assert record.cancel_reason == "first"
        assert _cancels(journal_url, instance_id) == [
            ("alice", "applied", "first"),
            ("bob", "no-op", "second"),
        ]


def test_two_cancels_racing_give_one_applied_and_one_no_op(
    journal_url: str, authority: Authority
) -> None:
    """Goal: two callers on their own connections cancelling one instance at the same moment
    are recorded as one applied and one no-op, never two applied.

    Method: RACES instances; per instance two threads, each with its own service, released
    together by a barrier; per instance exactly one applied and one no-op record, and the
    applied one's reason is the one the instance kept.
    """
    ids = [_started(journal_url, f"pair-{n}") for n in range(RACES)]
    services = [Operations(journal_url, authority=authority) for _ in range(2)]
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def cancel_all(operations: Operations, actor: str) -> None:
        try:
            for instance_id in ids:
                barrier.wait(timeout=30)
                operations.cancel(instance_id, reason=f"by {actor}", actor=actor)
        except Exception as exc:  # noqa: BLE001 - collected, then asserted to be none
            failures.append(exc)

    threads = [
        threading.Thread(target=cancel_all, args=(services[0], "alice")),
        threading.Thread(target=cancel_all, args=(services[1], "bob")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for operations in services:
        operations.close()
    assert failures == []
    with Operations(journal_url) as operations:
        kept = {i: operations.detail(i).instance.cancel_reason for i in ids}
    for instance_id in ids:
        records = _cancels(journal_url, instance_id)
        assert sorted(outcome for _, outcome, _ in records) == ["applied", "no-op"], records
        applied = next(reason for _, outcome, reason in records if outcome == "applied")
        assert kept[instance_id] == applied


@pytest.fixture(autouse=True)
def _participants(repair_faults: None) -> None:
    """The repair participants' switches start and end cleared."""
