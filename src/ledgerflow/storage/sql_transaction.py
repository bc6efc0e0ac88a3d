"""The kernel that applies a :class:`~ledgerflow.ledger.transaction.Transaction` (internal).

One loop over the transaction's parts, inside the caller's write transaction: the fences from
outside first (each instance's row locked, so nothing changes it before the writes), then each
owner's commit as :meth:`SqlStore.commit` applies it, then the other writes in order, each by
the store's own statement for it. The answers come back in the order of the writes. A refusal
of any part raises and leaves the whole transaction to roll back: nothing of it is durable.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ledgerflow.errors import IllegalTransitionError, InstanceNotFoundError
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.records import Commit, InstanceRecord, NewInstance, StartInstance
from ledgerflow.ledger.schedules import AdvanceSchedule, ScheduleWrite
from ledgerflow.ledger.transaction import (
    Answer,
    AppendAudit,
    Audited,
    CancelAsked,
    Deliver,
    Delivered,
    FromOutside,
    OutsideWrite,
    RaiseFlag,
    RequestCancel,
    Started,
    StartNow,
    Transaction,
    audited_entry,
)
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.storage.rows import Row, instance_from_row


class SqlStore(Protocol):
    """What the kernel takes of :class:`~ledgerflow.storage.sql_store.SqlStore`: the statement
    of each write, each run inside the transaction already open."""

    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]: ...

    def _apply(self, commit: Commit, now: float, *, fenced: bool = False) -> None: ...

    def _start_within(self, new: NewInstance, now: float) -> tuple[InstanceRecord, bool]: ...

    def _insert_audit(self, entry: AuditEntry, now: float) -> int: ...

    def _raise(
        self, instance_id: str, reason_code: str, evidence: str, detected_by: str, now: float | None
    ) -> bool: ...

    def _schedule_write(self, write: ScheduleWrite, now: float) -> int | bool: ...

    def _starts_within(
        self, news: Sequence[NewInstance], now: float
    ) -> list[tuple[InstanceRecord, bool]]: ...

    def _advance_schedules(self, writes: Sequence[AdvanceSchedule], now: float) -> list[int]: ...

    def deliver(self, write: Deliver, *, now: float) -> Delivered | None: ...

    def request_cancel(self, write: RequestCancel, *, now: float) -> CancelAsked | None: ...


def apply_transaction(
    store: SqlStore, transaction: Transaction, now: float, *, fenced: bool = False
) -> tuple[Answer, ...]:
    """Apply every part of ``transaction`` in the write transaction open on ``store``
    (``fenced``: its commits' owner fences were checked already, with a group's)."""
    for fence in transaction.fences:
        _fence_from_outside(store, fence)
    for commit in transaction.commits:
        store._apply(commit, now, fenced=fenced)
    answers: list[Answer] = []
    # Writes of one kind in a row (a schedules tick's advances, its starts) go in together:
    # on PostgreSQL a few round trips for the run, not a few per write.
    for kind, run in itertools.groupby(transaction.writes, key=type):
        writes = list(run)
        if kind is StartInstance and len(writes) > 1:
            news = [w.new for w in writes if isinstance(w, StartInstance)]
            started = store._starts_within(news, now)
            answers.extend(Started(instance=record, new=new) for record, new in started)
        elif kind is AdvanceSchedule and len(writes) > 1:
            advances = [w for w in writes if isinstance(w, AdvanceSchedule)]
            answers.extend(store._advance_schedules(advances, now))
        else:
            answers.extend(_write(store, write, now) for write in writes)
    return tuple(answers)


def _fence_from_outside(store: SqlStore, fence: FromOutside) -> None:
    rows, _ = store._run("lock_instance", {"instance_id": fence.instance_id})
    if not rows or (fence.tenant is not None and rows[0]["tenant"] != fence.tenant):
        raise InstanceNotFoundError(instance_id=fence.instance_id)
    status = instance_from_row(rows[0]).status
    if fence.live and status in FINAL_STATUSES:
        raise IllegalTransitionError(
            f"instance {fence.instance_id} has ended ({status.value})",
            machine="instance",
            state=status.value,
            event="write",
            instance_id=fence.instance_id,
        )


def _write(store: SqlStore, write: OutsideWrite, now: float) -> Answer:
    if isinstance(write, Audited):
        answer = _write(store, write.change, now)
        store._insert_audit(audited_entry(write.change, answer, write.entry), now)
        return answer
    if isinstance(write, Deliver | RequestCancel):
        made = (
            store.deliver(write, now=now)
            if isinstance(write, Deliver)
            else store.request_cancel(write, now=now)
        )
        if made is None:
            raise InstanceNotFoundError(instance_id=write.instance_id)
        return made
    if isinstance(write, StartInstance):
        record, new = store._start_within(write.new, now)
        return Started(instance=record, new=new)
    if isinstance(write, AppendAudit):
        return store._insert_audit(write.entry, now)
    if isinstance(write, StartNow):
        _, changed = store._run("start_now", {"instance_id": write.instance_id, "now": now})
        return changed == 1
    if isinstance(write, RaiseFlag):
        return store._raise(
            write.instance_id, write.reason_code, write.evidence, write.detected_by, now
        )
    if isinstance(write, ScheduleWrite):
        return store._schedule_write(write, now)
    raise TypeError(f"not a write of a transaction: {write!r}")
