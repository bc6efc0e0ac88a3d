"""Durable named locks: the writes that take, give up and hand on a lock, and what operators
read of one (internal; the records are re-exported where public).

A lock is named per tenant and held by at most one instance (the holder row's key is the
name and the tenant). Its writes ride in the owner's fenced commit and are applied by the store
kernel in that commit's transaction:

- :class:`AcquireLock` (with the lock step's start) makes the instance the holder if nobody
  holds the lock, else puts it at the end of the lock's queue; either way the grant reaches the
  instance as an event in its inbox (:data:`~ledgerflow.model.signal.LOCK_GRANT_PREFIX`), which
  the lock step takes as a wait takes a signal;
- :class:`ReleaseLock` (with the release's journal position) gives the lock up and, in the same
  transaction, makes the first waiter the holder and delivers its grant: no hand-over is lost;
- :class:`LeaveLockQueue` (with the lock step's timeout) takes the instance out of the queue.

An instance's final ending (SUCCEEDED, FAILED, COMPENSATED, CANCELLED, whoever writes it: its
owner or an operator's repair) releases every lock it holds and leaves every queue in the
ending's own transaction. A parked instance (MANUAL_INTERVENTION, FORWARD_RECOVERY_REQUIRED)
keeps its locks: the protected resource's state is what a person must decide about, and the
listing shows the holder as parked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerflow.model.ids import InstanceId, StepSeq, TenantId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.signal import LOCK_GRANT_PREFIX

# Who a grant's event names as its sender: the store, never a caller.
GRANT_SENDER = "ledgerflow.locks"


def grant_event(name: str) -> str:
    """The inbox name a grant of lock ``name`` is delivered under."""
    return LOCK_GRANT_PREFIX + name


@dataclass(frozen=True, slots=True, kw_only=True)
class AcquireLock:
    """Hold lock ``name`` (in the instance's tenant) from position ``seq``, or queue for it."""

    name: str
    seq: StepSeq


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseLock:
    """Give up lock ``name`` taken at position ``seq`` of run ``run``, and hand it to the first
    waiter. Conditional on that acquisition still holding it: done again, it changes nothing."""

    name: str
    seq: StepSeq
    run: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveLockQueue:
    """Stop waiting for lock ``name`` queued for at position ``seq`` (its timeout)."""

    name: str
    seq: StepSeq


@dataclass(frozen=True, slots=True, kw_only=True)
class LockWaiter:
    """An instance in a lock's queue, at its turn (``position``: the queue's order)."""

    instance_id: InstanceId
    run: int
    seq: int
    enqueued_at: float
    position: int
    status: InstanceStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class LockRecord:
    """A lock as operators see it: its holder, since when, the holder's status, and the queue
    in the order the lock will be handed on. A queue with no holder (every ``holder_*`` None)
    is listed too: a release always hands the lock on, so a free lock with waiters is a lost
    hand-over, shown rather than hidden (the oracle's lock checks call it a violation)."""

    name: str
    tenant: TenantId
    holder_instance: InstanceId | None
    holder_run: int | None
    holder_seq: int | None
    granted_at: float | None
    holder_status: InstanceStatus | None
    waiters: tuple[LockWaiter, ...] = ()

    @property
    def parked(self) -> bool:
        """Whether the holder stopped for a person (and keeps the lock until one decides)."""
        return self.holder_status in (
            InstanceStatus.MANUAL_INTERVENTION,
            InstanceStatus.FORWARD_RECOVERY_REQUIRED,
        )
