"""What every part of the SQL store stands on (internal).

The SQL store is one class made of parts that sit side by side on this seam, each a mixin of
one concern (reads, starts, claims, inbox, attention, audit, reconciliation, versions), none
built on another. What one part needs from elsewhere is declared here, once, and supplied by whoever
owns it:

- a dialect (:mod:`~ledgerflow.storage.sqlite`, :mod:`~ledgerflow.storage.postgres`) supplies
  running a named query, a write transaction, a consistent read and a savepoint, the first two
  joining a transaction already open on the thread (:meth:`SqlStore.transaction`);
- :class:`~ledgerflow.storage.sql_store.SqlStore` supplies, once for all dialects, sending a
  checked statement, batching, the timeline and the checked step, effect and instance writes;
- the parts offer each other the two hooks at the end (a claim's timeline entry, a flag).

:class:`RefusedError` is how a group write (commits, starts) abandons its transaction to be done
again one savepoint at a time.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from ledgerflow.errors import LedgerflowError
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.children import child_ending
from ledgerflow.ledger.records import (
    Commit,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    StepWrite,
)
from ledgerflow.ledger.transaction import Deliver, Delivered
from ledgerflow.model.ids import Generation, InstanceId, WorkerId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.storage.rows import Row


class RefusedError(Exception):
    """A commit or start of a group was refused: roll the group's transaction back (internal)."""

    def __init__(self, error: LedgerflowError) -> None:
        super().__init__(str(error))
        self.error = error


class SqlSeam(abc.ABC):
    # -- a dialect supplies ------------------------------------------------------------------

    @abc.abstractmethod
    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        """Run a named query; return its rows and the number of rows it changed."""

    @abc.abstractmethod
    def _dialect_write(self) -> contextlib.AbstractContextManager[None]:
        """A durable write transaction that holds the write lock from its first statement;
        inside one already open on this thread, a savepoint of it (the call is all or
        nothing, and commits with the transaction around it)."""

    @abc.abstractmethod
    def _read(self) -> contextlib.AbstractContextManager[None]:
        """A consistent read; inside an open transaction, a read of it."""

    @abc.abstractmethod
    def _savepoint(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    # -- SqlStore supplies for every dialect -------------------------------------------------

    @abc.abstractmethod
    def _write_transaction(self) -> contextlib.AbstractContextManager[None]:
        """The dialect's write transaction (:meth:`_dialect_write`), which makes again, after
        rolling back, the writes an error out of it asks to keep (``LedgerflowError.keep``)."""

    @abc.abstractmethod
    def _send(
        self,
        name: str,
        params: Mapping[str, Any],
        check: Callable[[list[Row], int], None] | None = None,
    ) -> None:
        """Run a named query whose answer only decides whether the transaction may commit."""

    @abc.abstractmethod
    def _batch(self, *, hold: bool = True) -> contextlib.AbstractContextManager[None]:
        """Within a write transaction: statements whose checks may wait for the block's end."""

    @property
    @abc.abstractmethod
    def _in_batch(self) -> bool:
        """Whether a :meth:`_batch` is open on this thread (batches do not nest)."""

    @abc.abstractmethod
    def _timeline(
        self,
        instance_id: InstanceId,
        generation: Generation,
        subject: str,
        from_state: str | None,
        to_state: str,
        now: float,
        detail: str | None,
    ) -> None:
        """A line on the instance's timeline, in the current write transaction."""

    @abc.abstractmethod
    def _write_step(
        self, write: StepWrite, generation: Generation, now: float, *, by_operator: bool = False
    ) -> None:
        """A checked step write (the machine's edge, the row's invariants, the state it
        replaces), with its timeline entry."""

    @abc.abstractmethod
    def _write_effect(
        self, write: EffectWrite, generation: Generation, now: float, *, by_operator: bool = False
    ) -> None:
        """A checked effect write, as :meth:`_write_step`."""

    @abc.abstractmethod
    def _write_instance(
        self, write: InstanceWrite, commit: Commit, now: float, *, by_operator: bool = False
    ) -> None:
        """A checked status change of the instance, as :meth:`_write_step`."""

    # -- the parts offer each other ----------------------------------------------------------

    @abc.abstractmethod
    def _claimed(self, record: InstanceRecord, owner: WorkerId) -> None:
        """The timeline entry of a claim (claims; a start that claims uses it too)."""

    @abc.abstractmethod
    def _raise(
        self, instance_id: str, reason_code: str, evidence: str, detected_by: str, now: float | None
    ) -> bool:
        """Open a flag in the current transaction; False when one of that reason is open
        (attention; a claim that sets a damaged row aside uses it too)."""

    @abc.abstractmethod
    def deliver(self, write: Deliver, *, now: float) -> Delivered | None:
        """Keep an event in an instance's inbox, in the current write transaction when one is
        open (inbox; an ending the store writes outside any worker delivers a child's outcome
        with it, a lock's grant is delivered with the write that makes its holder)."""

    def _child_ended(
        self, child: InstanceRecord, write: InstanceWrite, generation: Generation, now: float
    ) -> None:
        """An ending the store writes itself (a crash loop parked at a claim, an operator's
        repair) carries a child's outcome to its parent in the same transaction, as a worker's
        ending commit does (``runtime/child_endings.py``)."""
        if child.parent_instance_id is None or write.status not in TERMINAL_STATUSES:
            return
        ending = child_ending(
            child,
            status=write.status,
            generation=generation,
            reason_code=write.reason_code,
            cause=write.cause or child.cause,
            result=write.result,
        )
        self.deliver(ending, now=now)

    @abc.abstractmethod
    def _insert_audit(self, entry: AuditEntry, now: float) -> int:
        """Append an audit record in the current write transaction; return its id (audit; an
        adoption writes its record with its claim)."""
