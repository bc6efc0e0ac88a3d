"""A transaction of typed writes over any number of instances (internal).

A :class:`~ledgerflow.ledger.records.Commit` is one owner's writes to its own instance,
fenced on its generation. A :class:`Transaction` carries any number of those, fences on
instances touched "from outside" (which check only that the instance is there, and with
``live`` that it has not ended), and writes that are not an owner's: a delivery, a cancel
request, a start, an audit record, a flag. The store applies the whole of it or none of it,
and answers each write in order (:data:`Answer`): whether a delivery or a cancel request was
new is the store's answer inside the transaction, never a later read.

An :class:`Audited` write is a change from outside together with its audit record, whose
outcome the store's answer decides (:func:`audited_entry`), so that the change and the record
of who asked are on the ledger together or not at all.

Example (what a child workflow's start is: the parent's step and the child's start, one
transaction, the child's business key derived from the parent's step)::

    Transaction(
        commits=(Commit(instance_id=parent, owner=me, generation=g, writes=(step_write,)),),
        writes=(StartInstance(new=child),),
    )
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import Commit, Delivery, InstanceRecord, StartInstance
from ledgerflow.ledger.schedules import ScheduleWrite
from ledgerflow.model.ids import InstanceId, TenantId


@dataclass(frozen=True, slots=True, kw_only=True)
class FromOutside:
    """A fence on an instance no owner of this transaction holds: it must exist (else
    :class:`~ledgerflow.errors.InstanceNotFoundError`) and, with ``live``, not have ended
    (else :class:`~ledgerflow.errors.IllegalTransitionError`). Its row is locked until the
    transaction ends, so no other change to it slips in between the check and the writes."""

    instance_id: InstanceId
    live: bool = False
    # When given, the instance must be of this tenant, else it is not there for this
    # transaction (InstanceNotFoundError: another tenant's instance is not even said to exist).
    tenant: TenantId | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """Keep an event in an instance's inbox (deduplicated by ``event_id``); ``refuse``
    (refusal, reason) keeps it refused whatever the instance's state. Answer:
    :class:`Delivered`."""

    instance_id: InstanceId
    event_id: str
    name: str
    payload: str
    sender: str | None
    for_seq: int | None = None
    run: int | None = None
    refuse: tuple[str, str] | None = None
    # False: kept whatever the inbox's bounds (a child's ending, bounded by the parent's
    # limits.CHILDREN_OPEN_MAX open children, must never be refused for a full inbox).
    bounded: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered:
    """The inbox's answer: the event as kept, and whether this write kept it (False: its
    event id was kept already, by this event or another)."""

    delivery: Delivery
    new: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCancel:
    """Ask an instance to cancel (the first request stands). Answer: :class:`CancelAsked`."""

    instance_id: InstanceId
    reason: str
    compensate: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelAsked:
    """The store's answer to a cancel request: the instance after it, and whether this
    request is the one that stands (False: one stood already, or the instance had ended)."""

    instance: InstanceRecord
    new: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendAudit:
    """Append an audit record as given. Answer: its id."""

    entry: AuditEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class RaiseFlag:
    """Open a flag on an instance. Answer: False when one of that reason is open already."""

    instance_id: InstanceId
    reason_code: str
    evidence: str
    detected_by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Audited:
    """A change and its audit record, whose ``outcome`` (and ``refusal``) the store's answer
    to the change decides (:func:`audited_entry`). Answer: the change's answer."""

    change: Deliver | RequestCancel
    entry: AuditEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """The answer to a :class:`~ledgerflow.ledger.records.StartInstance`: the instance its
    business key names, and whether this write inserted it (False: the same start stood)."""

    instance: InstanceRecord
    new: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StartNow:
    """End a SCHEDULED instance's delay: it is due now (a signal-with-start that wakes it).
    Answer: True when it was SCHEDULED and is due now, False when there was no delay to end."""

    instance_id: InstanceId


OutsideWrite = (
    Deliver
    | RequestCancel
    | AppendAudit
    | Audited
    | RaiseFlag
    | StartInstance
    | StartNow
    | ScheduleWrite
)
Answer = Delivered | CancelAsked | Started | int | bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Transaction:
    """Owners' commits, fences from outside and other writes, all or nothing (see module)."""

    commits: tuple[Commit, ...] = field(default=())
    fences: tuple[FromOutside, ...] = field(default=())
    writes: tuple[OutsideWrite, ...] = field(default=())

    @property
    def instances(self) -> frozenset[InstanceId]:
        """Every instance this transaction fences, as an owner or from outside."""
        return frozenset(
            [c.instance_id for c in self.commits] + [f.instance_id for f in self.fences]
        )


def audited_entry(change: Deliver | RequestCancel, answer: Answer, entry: AuditEntry) -> AuditEntry:
    """The audit record of a change from outside, its outcome the store's answer: ``applied``
    when the change was made, ``no-op`` when it was a repeat (an event id kept already, a
    cancel request that stood already), ``refused`` (with the inbox's reason) when the event
    was kept as refused."""
    if isinstance(answer, Delivered):
        if not answer.new:
            return dataclasses.replace(entry, outcome="no-op")
        if answer.delivery.state is DeliveryState.REJECTED:
            return dataclasses.replace(entry, outcome="refused", refusal=answer.delivery.reason)
        return dataclasses.replace(entry, outcome="applied")
    if isinstance(answer, CancelAsked):
        return dataclasses.replace(entry, outcome="applied" if answer.new else "no-op")
    raise TypeError(f"no audit outcome for {type(change).__name__} answered {answer!r}")
