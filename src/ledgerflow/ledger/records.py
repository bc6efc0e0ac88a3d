"""Frozen rows that cross the storage seam, and the writes a commit is made of (internal).

A :class:`Commit` is everything one owner changes about one instance in one durable step; each
write names the state it expects to replace, so the store refuses a change made against a state
that is no longer there (zero rows updated is an error, never a silent no-op).

Payload fields (``input``, ``result``, ``output``, ``evidence``...) hold the ledger's text, as
the codec wrote it; each has a ``*_value`` beside it (a :class:`Decoded`) with the decoded
value, for the default JSON codec (an engine with another codec decodes the text with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Self, TypeVar, overload

from ledgerflow.deprecation import renamed
from ledgerflow.ledger.delivery import DeliveryEvent, DeliveryState
from ledgerflow.ledger.locks import AcquireLock, LeaveLockQueue, ReleaseLock
from ledgerflow.ledger.values import PublishValue
from ledgerflow.model.codec import JSON
from ledgerflow.model.debounce import Debounce
from ledgerflow.model.effect import EffectEvent, EffectState
from ledgerflow.model.ids import (
    BusinessKey,
    CommandId,
    EffectId,
    Generation,
    IdempotencyKey,
    InstanceId,
    RunNumber,
    StepSeq,
    TenantId,
    WorkerId,
)
from ledgerflow.model.instance import InstanceEvent, InstanceStatus
from ledgerflow.model.start_policy import IfEnded, IfRunning
from ledgerflow.model.step import StepEvent, StepKind, StepStatus

RecordT = TypeVar("RecordT")
# Every instance's first run (a NewType's call made once, not in a dataclass default).
_FIRST_RUN = RunNumber(1)
StateT = TypeVar("StateT")
EventT = TypeVar("EventT")


class Decoded:
    """A ``*_value`` beside a payload column: the column's text decoded on each read (with
    the default JSON codec), ``None`` where the column holds none. One descriptor serves every
    record, so a record declares which columns it decodes and nothing else."""

    def __init__(self, column: str) -> None:
        self.column = column

    @overload
    def __get__(self, record: None, owner: type) -> Self: ...
    @overload
    def __get__(self, record: object, owner: type) -> Any: ...
    def __get__(self, record: object, owner: type) -> Any:
        if record is None:
            return self
        return _decoded(getattr(record, self.column))


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRecord:
    instance_id: InstanceId
    tenant: TenantId
    workflow_name: str
    workflow_version: int
    fingerprint: str
    business_key: BusinessKey
    run: RunNumber
    status: InstanceStatus
    owner: WorkerId | None
    generation: Generation
    lease_expires_at: float | None
    available_at: float
    input: str
    result: str | None
    reason_code: str | None
    reason: str | None
    created_at: float
    updated_at: float
    # A durable cancel request, written by whoever asked; the owner honours it.
    cancel_requested_at: float | None = None
    cancel_reason: str | None = None
    cancel_compensate: bool = True
    # Leases that ran out in a row since its last commit (the crash-loop detector's count).
    lease_expiries: int = 0
    # What took the instance off its happy path (a workflow error, a park, a cancel request),
    # kept to its end: a COMPENSATED or CANCELLED instance still names what led to it.
    cause: str | None = None
    # What became of an accepted cancel request: "honoured" (it ended CANCELLED) or
    # "overtaken" (it ended otherwise first); None while none is settled.
    cancel_outcome: str | None = None
    # The W3C trace context (JSON: traceparent, tracestate) of its run's span, when traced.
    trace_context: str | None = None
    # The open run's own input, once a run continued as new (None on run 1: ``input``).
    run_input: str | None = None
    # A child's link to its parent: the parent, the parent's run and the journal position
    # that started it (None for a top-level instance).
    parent_instance_id: InstanceId | None = None
    parent_run: RunNumber | None = None
    parent_seq: StepSeq | None = None
    # What the parent's final ending does to it while live: "cancel", "abandon" or "wait".
    on_parent_end: str | None = None
    # The first run of the open chain: 1, or the run a start opened after the instance ended
    # (if_ended). Runs before it ended for good and carry no obligation forward.
    first_run: RunNumber = _FIRST_RUN

    input_value = Decoded("input")
    """The workflow's input as started, decoded (a later run's is :attr:`run_input_value`)."""
    result_value = Decoded("result")
    """The workflow's result, decoded (None until it succeeded)."""

    @property
    def open_run_input(self) -> str:
        """The input the open run's workflow function is called with (the start's on run 1,
        the one ``continue_as_new`` gave on a later run)."""
        return self.input if self.run_input is None else self.run_input

    @property
    def run_input_value(self) -> Any:
        """The open run's input, decoded."""
        return _decoded(self.open_run_input)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    instance_id: InstanceId
    run: RunNumber
    seq: StepSeq
    kind: StepKind
    name: str
    command_id: CommandId
    status: StepStatus
    attempt: int
    input: str | None
    output: str | None
    error: str | None
    retry_policy: str
    next_attempt_at: float | None
    generation: Generation
    updated_at: float
    # The errors of this step's failed attempts, oldest first, bounded (a JSON array; see
    # model.attempts).
    attempt_errors: str | None = None
    # The traceback of the latest failed attempt of a local step, bounded; None otherwise.
    error_traceback: str | None = None

    input_value = Decoded("input")
    """The step's input snapshot, decoded."""
    output_value = Decoded("output")
    """What the step returned (or the result an operator substituted), decoded."""
    error_value = Decoded("error")
    """The step's last error, decoded (``None`` when it has none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectRecord:
    effect_id: EffectId
    instance_id: InstanceId
    run: RunNumber
    seq: StepSeq
    participant: str
    operation: str
    classification: str
    idempotency_key: IdempotencyKey
    state: EffectState
    attempt: int
    # The highest attempt in doubt that no lookup has fenced; 0 when none is.
    doubt: int
    payload: str
    evidence: str | None
    reason: str | None
    generation: Generation
    updated_at: float
    # For a compensation: the effect it undoes.
    compensates: EffectId | None = None
    # The errors of attempts that gave no proof or were refused, oldest first, bounded.
    attempt_errors: str | None = None
    # Lookups in a row that could not be asked at all (the participant was unreachable).
    lookup_failures: int = 0
    # The participant contract version its declaration carried when the intent was written.
    contract_version: str | None = None
    # The last durable heartbeat (an effect declared with heartbeat_timeout): when, until when
    # the attempt counts as alive (the store's clock), by which attempt and generation, and
    # the details it carried (kept across attempts: the next one reads them).
    heartbeat_at: float | None = None
    heartbeat_due_at: float | None = None
    heartbeat_attempt: int = 0
    heartbeat_generation: int = 0
    heartbeat_details: str | None = None

    payload_value = Decoded("payload")
    """The effect's payload, decoded."""
    evidence_value = Decoded("evidence")
    """The participant's receipt (or an operator's evidence), decoded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineEntry:
    """One line of an instance's timeline: what changed, from what, by which generation.

    Not to be confused with an event delivered to an instance (a signal, callback or approval:
    :class:`Delivery`, whose ``event_id`` the sender chose): the timeline is the ledger's own
    record of its changes, numbered by the store (``entry_id``).
    """

    entry_id: int
    instance_id: InstanceId
    at: float
    generation: Generation
    subject: str
    from_state: str | None
    to_state: str
    detail: str | None

    @property
    def event_id(self) -> int:
        """Deprecated: the old name of :attr:`entry_id` (removed in 0.3.0)."""
        renamed("TimelineEntry.event_id", "TimelineEntry.entry_id")
        return self.entry_id


@dataclass(frozen=True, slots=True, kw_only=True)
class Journal:
    """What an instance's run has recorded, in step order."""

    steps: dict[StepSeq, StepRecord]
    effects: dict[StepSeq, EffectRecord]


@dataclass(frozen=True, slots=True, kw_only=True)
class StartClaim:
    """A start whose own process will drive the new instance: it is claimed in the start's
    transaction (start and first claim are one durable write) for ``owner``."""

    owner: WorkerId
    lease_seconds: float
    # The lease clock; None where the database's clock decides (as for a claim).
    now: float | None
    # When the worker asked (time.monotonic()): the lease it gets starts no earlier.
    asked_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalWrite(Generic[RecordT, StateT, EventT]):
    """A journal row moved from ``expected`` by ``event`` to ``record`` (whose state the
    machine gives: see :mod:`ledgerflow.ledger.transitions`, which builds every write);
    ``detail`` is the timeline's line for it."""

    record: RecordT
    expected: StateT
    event: EventT
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepWrite(JournalWrite[StepRecord, StepStatus, StepEvent]):
    """A step moved by its event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectWrite(JournalWrite[EffectRecord, EffectState, EffectEvent]):
    """An effect moved by its event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceWrite:
    """A status change of the instance by ``event``; ``release`` gives up the lease in the
    same write."""

    status: InstanceStatus
    expected: InstanceStatus
    event: InstanceEvent
    result: str | None = None
    reason_code: str | None = None
    reason: str | None = None
    release: bool = False
    available_at: float | None = None
    # The timeline's detail for this change (default: the reason code); a repair names its
    # audit record here.
    detail: str | None = None
    # Why the instance leaves its happy path (see InstanceRecord.cause). A cause already
    # recorded is kept (a compensation parked later still names the failure that started it);
    # RUNNING, WAITING and SUCCEEDED clear it.
    cause: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """Give up the lease without a status change; ``available_at`` is when to look again."""

    available_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeDelivery:
    """A wait takes a pending event: it answers that wait (step ``seq``) and no other."""

    event: ClassVar[DeliveryEvent] = DeliveryEvent.TAKE

    event_id: str
    seq: StepSeq


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectDelivery:
    """A pending event the wait may not accept (its sender may not approve): kept, refused."""

    event: ClassVar[DeliveryEvent] = DeliveryEvent.DECLINE

    event_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NoPendingDelivery:
    """Holds the commit to there being no pending event of this name: a timeout wins only
    if no event arrived first."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NoCancelRequest:
    """Holds the commit to there being no cancel request: a new effect's intent, a wait's or a
    timer's start is recorded only if no request arrived first (the request wins)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectHeartbeat:
    """An in-flight attempt is alive: a conditional write on the effect's row, refused
    (:class:`~ledgerflow.errors.AttemptSupersededError`) unless the effect is still INTENDED
    at ``attempt``; the commit's owner fence adds the generation. The attempt counts as cut off
    from ``timeout_seconds`` after the store's time of this write. ``details`` (ledger text)
    replaces the last ones; None keeps them (the beat written at dispatch)."""

    effect_id: EffectId
    seq: StepSeq
    attempt: int
    timeout_seconds: float
    details: str | None = None
    # The time of the write on the clock leases are measured by; None: the database's own
    # (PostgreSQL with real time: a worker's clock never decides whether an attempt is cut off).
    at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class KeepTraceContext:
    """Keep the trace context of the instance's first run span (a later run continues it; one
    already kept is never replaced)."""

    trace_context: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinueRun:
    """Close run ``run`` and open run ``run + 1`` of the same instance with ``input``, in
    this commit (``ctx.continue_as_new``): the closed run's row of history is written, every
    event no wait has taken moves to the new run, and the instance keeps its identity, owner,
    generation and lease. Refused while an effect of run ``run`` is not settled
    (:class:`~ledgerflow.errors.UnsettledEffectsError`) or the instance is on another run."""

    run: RunNumber
    input: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A closed run of an instance: its input, how many steps it journaled, when it closed
    and by which generation (the open run is the instance's own ``run``)."""

    instance_id: InstanceId
    run: RunNumber
    input: str
    steps: int
    generation: Generation
    closed_at: float
    # How the run ended when a start opened the next one (if_ended); None: it continued as new.
    ended: str | None = None

    input_value = Decoded("input")
    """The run's input, decoded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartInstance:
    """Another instance started in this commit's transaction (what a child workflow's start
    will write beside its parent's step): inserted, or, if its business key started the same
    workflow, version and input already, kept as it is. Committed with the commit's other
    writes or not at all; a key that started something else refuses the whole commit."""

    new: NewInstance


Write = (
    StepWrite
    | EffectWrite
    | InstanceWrite
    | Release
    | ConsumeDelivery
    | RejectDelivery
    | NoPendingDelivery
    | NoCancelRequest
    | EffectHeartbeat
    | KeepTraceContext
    | StartInstance
    | ContinueRun
    | AcquireLock
    | ReleaseLock
    | LeaveLockQueue
    | PublishValue
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """An event delivered to an instance: a signal, a callback or an approval."""

    instance_id: InstanceId
    event_id: str
    name: str
    payload: str
    sender: str | None
    for_seq: int | None
    received_at: float
    state: DeliveryState
    reason: str | None
    consumed_seq: int | None = None
    # Why a REJECTED event was refused: "ended", "late" or "not-approver".
    refusal: str | None = None
    # The run it is filed under: the run open when it was kept, moved to the next run by a
    # switch while no wait has taken it (so, once consumed, the run whose step took it).
    run: int = 1

    @property
    def payload_value(self) -> Any:
        """The event's payload, decoded."""
        return _decoded(self.payload)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsistencySignals:
    """What the journal says needs a person or is in doubt, counted (metrics' gauges)."""

    parked_by_reason: dict[str, int]
    flagged_by_reason: dict[str, int]
    unknown_open: int
    # The earliest last change of an UNKNOWN effect (store time); None when none is open.
    unknown_oldest_at: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartedCount:
    """Instances started in one time bucket that are in ``status`` now (an activity chart's
    bar segment); ``bucket`` counts from the window's start, 0 the first."""

    bucket: int
    status: InstanceStatus
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """Writes of one owner to one instance, fenced on its generation, applied all or nothing."""

    instance_id: InstanceId
    owner: WorkerId
    generation: Generation
    writes: tuple[Write, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class NewInstance:
    instance_id: InstanceId
    tenant: TenantId
    workflow_name: str
    workflow_version: int
    fingerprint: str
    business_key: BusinessKey
    input: str
    # A child's link to its parent (see InstanceRecord), written in the parent's transaction.
    parent_instance_id: InstanceId | None = None
    parent_run: RunNumber | None = None
    parent_seq: StepSeq | None = None
    on_parent_end: str | None = None
    # Start options (the defaults are a plain start). When it is due: None, now; a later
    # time keeps it SCHEDULED until then. What a start does under a used key: see
    # model/start_policy.py.
    available_at: float | None = None
    if_running: IfRunning = IfRunning.RETURN
    if_ended: IfEnded = IfEnded.RETURN
    # A debounced start (model/debounce.py): due when its window goes quiet; a later debounced
    # start of the key replaces the pending input instead of being refused.
    debounce: Debounce | None = None


def _decoded(text: str | None) -> Any:
    return None if text is None else JSON.decode(text)
