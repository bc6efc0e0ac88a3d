"""The engine's core: what both engines do, as plain synchronous calls on the store (internal).

Starting by business key, delivering events, completing asynchronous effects, cancelling and
reading an instance: the rules live here once, in :class:`EngineCore`, and
:class:`~ledgerflow.runtime.engine.Engine` (asyncio) and
:class:`~ledgerflow.runtime.sync_engine.SyncEngine` (blocking) only call them. (A *command* in the
ledger's sense is what a step sends a participant; nothing here is one.)
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Unpack

from ledgerflow import limits
from ledgerflow.deprecation import renamed
from ledgerflow.errors import (
    ConcurrencyError,
    ConfigurationError,
    IllegalTransitionError,
    InstanceNotFoundError,
    PayloadError,
    ResultTimeoutError,
    WorkflowError,
)
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import (
    Delivery,
    EffectRecord,
    InstanceRecord,
    NewInstance,
    RunRecord,
    StartInstance,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.ledger.transaction import Deliver, RequestCancel, StartNow, Transaction
from ledgerflow.ledger.transaction import Delivered as Kept
from ledgerflow.ledger.transaction import Started as StartAnswer
from ledgerflow.ledger.values import Published
from ledgerflow.model import names
from ledgerflow.model.codec import Codec
from ledgerflow.model.debounce import debounce_of
from ledgerflow.model.definition import Registry, WorkflowDefinition, WorkflowFunction
from ledgerflow.model.flow import FlowLimit, effect_scope
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.signal import not_approver, signal_name
from ledgerflow.model.start_policy import policies, start_time
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime.call_options import CompletionOptions as CompletionOptions
from ledgerflow.runtime.call_options import ListOptions as ListOptions
from ledgerflow.runtime.call_options import SignalOptions as SignalOptions
from ledgerflow.runtime.call_options import StartOptions as StartOptions
from ledgerflow.runtime.completion import completion_event
from ledgerflow.runtime.debounce import collapsed, refuse_debounce
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.storage.store import JournalStore, LedgerReads


def instance_id_for(tenant: TenantId, workflow: str, key: BusinessKey) -> InstanceId:
    """Derived from the business key, so two processes starting one key name one instance."""
    digest = hashlib.sha256(f"{tenant}\0{workflow}\0{key}".encode()).hexdigest()
    return InstanceId(f"wf_{digest[:26]}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """What :meth:`Engine.start` returns: the instance, whether this call created it, and
    whether it was debounced into the key's pending instance (``debounce_seconds=``: its input
    replaced the pending one and its start moved; docs/programming-model.md)."""

    instance: InstanceRecord
    created: bool
    debounced: bool = False

    @property
    def instance_id(self) -> InstanceId:
        """The id of the instance started (or found again under its business key)."""
        return self.instance.instance_id


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested:
    """What a cancel request came to: the instance, and whether this call recorded the
    request (False: one stood already, and the first one wins). The store decides which, in
    the request's own transaction, so two racing callers never both hear "recorded"."""

    instance: InstanceRecord
    recorded: bool


class DeliveryOutcome(enum.Enum):
    """What became of a delivered event; the HTTP endpoint answers with the matching status."""

    ACCEPTED = "accepted"  # kept for the wait that takes it (202)
    DUPLICATE = "duplicate"  # this event id was delivered before; nothing changed (200)
    LATE = "late"  # its step is closed or it is for an older run; kept, refused (409)
    ENDED = "ended"  # the instance has ended; kept, refused (410)
    NOT_APPROVER = "not-approver"  # the sender may not decide this approval; kept, refused (403)


_REFUSALS = {
    "ended": DeliveryOutcome.ENDED,
    "late": DeliveryOutcome.LATE,
    "not-approver": DeliveryOutcome.NOT_APPROVER,
    # A broker reply for an attempt the effect has moved past, or one whose effect id is not
    # the key's: kept, refused, as late ones are.
    "superseded": DeliveryOutcome.LATE,
    "foreign": DeliveryOutcome.LATE,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered:
    """What :meth:`Engine.signal` returns: the event as the inbox holds it, and its outcome."""

    delivery: Delivery
    outcome: DeliveryOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalStarted:
    """What :meth:`Engine.signal_with_start` returns: the start's answer and the event's,
    committed together."""

    started: Started
    delivered: Delivered

    @property
    def instance_id(self) -> InstanceId:
        """The id of the instance started (or found again under its business key)."""
        return self.started.instance_id


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceDetail:
    """An instance with its ledgers, for ``show``: its step and effect journal, its timeline
    (every change of state) and its inbox (the events delivered to it)."""

    instance: InstanceRecord
    steps: list[StepRecord]
    effects: list[EffectRecord]
    timeline: list[TimelineEntry]
    inbox: list[Delivery]
    # The runs it closed by continuing as new, oldest first (the latest RUNS_SHOWN_MAX); the
    # steps and effects above are the open run's.
    runs: list[RunRecord] = field(default_factory=list)
    # The child workflows it started, oldest first (its parent is on the instance record).
    children: list[InstanceRecord] = field(default_factory=list)
    # What it published (ctx.publish, update replies), by name: kept across runs and its end.
    values: list[Published] = field(default_factory=list)

    @property
    def events(self) -> list[TimelineEntry]:
        """Deprecated: the old name of :attr:`timeline` (removed in 0.3.0)."""
        renamed("InstanceDetail.events", "InstanceDetail.timeline")
        return self.timeline


def _workflow_name(workflow: str | WorkflowFunction) -> str:
    return workflow if isinstance(workflow, str) else getattr(workflow, "__name__", "")


class EngineCore:
    """What both engines share: the start rules and the result rules."""

    def __init__(
        self, store: JournalStore, registry: Registry, codec: Codec, metrics: Metrics | None = None
    ) -> None:
        self.store = store
        self.registry = registry
        self.codec = codec
        # Starts are counted here, for every face (None: nothing is counted).
        self.metrics = metrics
        declared = registry.declared_limits()
        self.declared_limits_applied: list[FlowLimit] = []
        if declared:
            # New or changed declarations only: a run-time change since stands (sql_flow).
            actor = f"code@{socket.gethostname()}:{os.getpid()}"
            self.declared_limits_applied = store.declare_effect_limits(declared, actor=actor)

    def prepare(
        self,
        workflow: str | WorkflowFunction,
        *,
        key: str,
        input: Any = None,
        version: int | None = None,
        tenant: str | None = None,
        start_at: float | datetime.datetime | None = None,
        start_in: float | None = None,
        if_running: str = "return",
        if_ended: str = "return",
        debounce_seconds: float | None = None,
        debounce_max_seconds: float | None = None,
        now: float | None = None,
        database_clock: bool = False,
    ) -> tuple[WorkflowDefinition, NewInstance]:
        """The start asked for, checked (``database_clock``: a debounced start is decided by
        the database's clock, the caller's being the real time)."""
        name = _workflow_name(workflow)
        definition = self.registry.get(name, version)
        tenant_id, business_key = names.tenant(tenant), names.business_key(key)
        running, ended = policies(if_running, if_ended)
        at = start_time(
            start_at=start_at, start_in=start_in, now=time.time() if now is None else now
        )
        debounce = debounce_of(debounce_seconds, debounce_max_seconds, delayed=at is not None)
        if debounce is not None and database_clock:
            debounce = dataclasses.replace(debounce, database_clock=True)
        new = NewInstance(
            instance_id=instance_id_for(tenant_id, definition.name, business_key),
            tenant=tenant_id,
            workflow_name=definition.name,
            workflow_version=definition.version,
            fingerprint=definition.fingerprint,
            business_key=business_key,
            input=self.codec.encode(input),
            available_at=at,
            if_running=running,
            if_ended=ended,
            debounce=debounce,
        )
        return definition, new

    def start(self, new: NewInstance, *, now: float) -> Started:
        """Insert the instance, or return the one this business key already started.

        A repeated start must ask for the same thing; otherwise it is a caller's bug.
        """
        found, created = self.store.start_instance(new, now=now)
        return self.started(new, found, created=created)

    def started(self, new: NewInstance, found: InstanceRecord, *, created: bool) -> Started:
        """The answer to a start (the store decided it under the start's policies: a repeated
        start asking for something else was refused there, :class:`KeyInUseError`)."""
        if self.metrics is not None and created:
            self.metrics.started(new.workflow_name, new.workflow_version)
        return Started(instance=found, created=created, debounced=collapsed(new, found, created))

    def cancel(
        self, instance_id: str, *, reason: str, compensate: bool, now: float
    ) -> CancelRequested:
        """Record a cancel request (the first one wins; repeating it is a no-op)."""
        if not reason.strip():
            raise PayloadError("a cancel request needs a reason")
        asked = self.store.request_cancel(
            RequestCancel(
                instance_id=InstanceId(instance_id), reason=reason, compensate=compensate
            ),
            now=now,
        )
        if asked is None:
            raise InstanceNotFoundError(instance_id=instance_id)
        record = asked.instance
        if record.cancel_requested_at is None:
            raise IllegalTransitionError(
                f"the instance already ended {record.status.value}: there is nothing to cancel",
                machine="instance",
                state=record.status.value,
                event="cancel",
                instance_id=instance_id,
            )
        return CancelRequested(instance=record, recorded=asked.new)

    def signal(
        self, instance_id: str, name: str, *, now: float, **event: Unpack[SignalOptions]
    ) -> Delivered:
        """Deliver an event: kept once per event id, refused (and kept) when too late. No
        signal may take a name reserved for an effect's completion
        (:func:`~ledgerflow.model.signal.signal_name`)."""
        name = signal_name(names.event_text(name, what="signal name"))
        return self._deliver(instance_id, name, now=now, **event)

    def _deliver(
        self,
        instance_id: str,
        name: str,
        *,
        now: float,
        event_id: str,
        payload: Any = None,
        sender: str | None = None,
        for_step: int | None = None,
        run: int | None = None,
        refuse: tuple[str, str] | None = None,
    ) -> Delivered:
        """Keep an event in the inbox, under any name (a signal's or a completion's)."""
        name, event_id = (
            names.event_text(name, what="signal name"),
            names.event_text(event_id, what="event id"),
        )
        record = self.get(instance_id)
        refuse = refuse or self._approval_refusal(record, name=name, sender=sender)
        stored = self.store.deliver(
            Deliver(
                instance_id=record.instance_id,
                event_id=event_id,
                name=name,
                payload=self.codec.encode(payload),
                sender=sender,
                for_seq=for_step,
                run=run,
                refuse=refuse,
            ),
            now=now,
        )
        if stored is None:
            raise InstanceNotFoundError(instance_id=instance_id)
        return self._outcome(stored, name=name, payload=payload, sender=sender)

    def _outcome(self, stored: Kept, *, name: str, payload: Any, sender: str | None) -> Delivered:
        """What a delivery came to, from the inbox's answer: a used event id is a duplicate
        only if it carried the same event."""
        delivery, new = stored.delivery, stored.new
        instance_id, event_id = delivery.instance_id, delivery.event_id
        differs = [
            what
            for what, same in (
                ("name", delivery.name == name),
                ("payload", self.codec.decode(delivery.payload) == payload),
                ("sender", delivery.sender == sender),
            )
            if not same
        ]
        if not new and differs:
            # The inbox deduplicates by event id: another event under a used id would be lost.
            raise ConcurrencyError(
                f"event id {event_id!r} was already used for an event with another "
                f"{' and '.join(differs)}; nothing was delivered",
                instance_id=instance_id,
                event_id=event_id,
            )
        if not new:
            outcome = DeliveryOutcome.DUPLICATE
        elif delivery.state is DeliveryState.PENDING:
            outcome = DeliveryOutcome.ACCEPTED
        else:
            outcome = _REFUSALS[delivery.refusal or "late"]
        return Delivered(delivery=delivery, outcome=outcome)

    def signal_with_start(
        self,
        new: NewInstance,
        name: str,
        *,
        now: float,
        event_id: str,
        payload: Any = None,
        sender: str | None = None,
        wake: bool = False,
    ) -> SignalStarted:
        """Start (or find, as a start would) the instance and deliver an event to it, in one
        transaction: both, or neither (a start refused with KeyInUseError delivers nothing).
        The event is kept for a wait of the instance's run, even while it is SCHEDULED; it
        ends the delay only with ``wake`` (Temporal's signal-with-start always does)."""
        refuse_debounce(new, "signal_with_start")
        name = signal_name(names.event_text(name, what="signal name"))
        event_id = names.event_text(event_id, what="event id")
        found = self.store.get_instance(new.instance_id)
        refuse = None if found is None else self._approval_refusal(found, name=name, sender=sender)
        deliver = Deliver(
            instance_id=new.instance_id,
            event_id=event_id,
            name=name,
            payload=self.codec.encode(payload),
            sender=sender,
            refuse=refuse,
        )
        woken = (StartNow(instance_id=new.instance_id),) if wake else ()
        writes = (StartInstance(new=new), deliver, *woken)
        start, kept, *_ = self.store.apply(Transaction(writes=writes), now=now)
        assert isinstance(start, StartAnswer)
        assert isinstance(kept, Kept)
        started = self.started(new, start.instance, created=start.new)
        return SignalStarted(
            started=started,
            delivered=self._outcome(kept, name=name, payload=payload, sender=sender),
        )

    def delivery(self, instance_id: str, event_id: str) -> Delivery:
        """What became of one event, by its id: PENDING (kept for a wait), CONSUMED (taken by
        the wait of step ``consumed_seq``) or REJECTED (with ``refusal`` and ``reason``)."""
        record = self.get(instance_id)
        found = self.store.delivery(record.instance_id, event_id)
        if found is None:
            raise InstanceNotFoundError(
                f"instance {instance_id} has no event {event_id!r}",
                instance_id=instance_id,
                event_id=event_id,
            )
        return found

    def complete_effect(
        self,
        idempotency_key: str,
        *,
        now: float,
        applied: bool,
        evidence: Any = None,
        reason: str | None = None,
        event_id: str | None = None,
        attempt: int | None = None,
        effect_id: str | None = None,
        generation: int | None = None,
        attempt_fenced: bool = True,
        dead_letter: dict[str, Any] | None = None,
    ) -> Delivered:
        """A participant's callback for an asynchronous effect, delivered to its step."""
        effect = self.store.find_effect(idempotency_key)
        if effect is None:
            raise InstanceNotFoundError(
                f"no effect has the idempotency key {idempotency_key!r}", key=idempotency_key
            )
        payload: dict[str, Any] = {"applied": applied, "evidence": evidence, "reason": reason}
        if attempt is not None and generation is not None:
            payload["answered"] = {"attempt": attempt, "generation": generation}
        if dead_letter is not None:
            payload["dead_letter"] = dead_letter
        refuse: tuple[str, str] | None = None
        if self.get(effect.instance_id).status in TERMINAL_STATUSES:
            pass  # refused as for an ended instance, which says the most
        elif effect_id is not None and effect_id != effect.effect_id:
            refuse = (
                "foreign",
                (
                    f"the reply names effect {effect_id}; key {idempotency_key} is effect "
                    f"{effect.effect_id}"
                ),
            )
        elif attempt_fenced and attempt is not None and attempt != effect.attempt:
            refuse = (
                "superseded",
                (f"the reply answers attempt {attempt}; the effect is on attempt {effect.attempt}"),
            )
        return self._deliver(
            effect.instance_id,
            completion_event(effect.effect_id),
            event_id=event_id or f"completion:{idempotency_key}",
            payload=payload,
            sender=effect.participant,
            for_step=effect.seq,
            run=effect.run,
            now=now,
            refuse=refuse,
        )

    def _approval_refusal(
        self, record: InstanceRecord, *, name: str, sender: str | None
    ) -> tuple[str, str] | None:
        """Refuse at delivery a sender an open approval does not allow (the wait refuses it
        again when it takes events, for an approval that opens later)."""
        journal = self.store.journal(record.instance_id, record.run)
        for step in journal.steps.values():
            if step.kind is not StepKind.WAIT or step.status is not StepStatus.STARTED:
                continue
            spec = self.codec.decode(step.input or "{}")
            allowed = spec.get("approvers") or []
            if spec.get("event") == name and allowed and sender not in allowed:
                return "not-approver", not_approver(sender, name, allowed)
        return None

    def set_concurrency_limit(
        self, *, workflow: str | None, tenant: str | None, in_flight_max: int | None
    ) -> None:
        if (workflow is None) == (tenant is None):
            raise ConfigurationError("a concurrency limit names a workflow or a tenant, not both")
        if (
            in_flight_max is not None
            and not 0 <= in_flight_max <= limits.WORKER_CONCURRENCY_MAX * 1000
        ):
            raise ConfigurationError(f"in_flight_max must be >= 0, got {in_flight_max}")
        scope = f"workflow:{workflow}" if workflow is not None else f"tenant:{tenant}"
        self.store.set_limit(scope, in_flight_max)

    def limit_effect(self, participant: str, operation: str, **bounds: Any) -> FlowLimit | None:
        """Set the flow-control limit of one participant's operation (no bounds: remove it)."""
        scope = effect_scope(participant, operation)
        if not bounds:
            self.store.set_effect_limit(None, scope=scope)
            return None
        try:
            limit = FlowLimit(scope=scope, **bounds)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"effect limit {scope}: {exc}") from None
        self.store.set_effect_limit(limit)
        return limit

    def get(self, instance_id: str) -> InstanceRecord:
        record = self.store.get_instance(InstanceId(instance_id))
        if record is None:
            raise InstanceNotFoundError(instance_id=instance_id)
        return record

    def settled(self, record: InstanceRecord, *, deadline: float, timeout: float) -> bool:
        """Whether a waiter may stop: the instance is terminal, or time is up (an error)."""
        if record.status in TERMINAL_STATUSES:
            return True
        if time.monotonic() >= deadline:
            raise ResultTimeoutError(
                f"instance is still {record.status.value} after {timeout}s",
                instance_id=record.instance_id,
            )
        return False

    def list(
        self,
        *,
        status: InstanceStatus | None = None,
        workflow: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        return self.store.list_instances(
            status=status,
            workflow_name=workflow,
            tenant=TenantId(tenant) if tenant else None,
            limit=limit,
        )

    def outcome(self, record: InstanceRecord) -> Any:
        if record.status is InstanceStatus.SUCCEEDED:
            return self.codec.decode(record.result or "null")
        raise ended_error(record)


def ended_error(record: InstanceRecord) -> WorkflowError:
    """The error that says how an instance without a result ended (or where it stopped)."""
    message = f"{_how_it_stopped(record.status)}: {record.reason}"
    if record.cause and record.cause not in (record.reason or ""):
        message += f"; cause: {record.cause}"
    return WorkflowError(
        message,
        instance_id=record.instance_id,
        status=record.status.value,
        reason_code=record.reason_code,
        cause=record.cause,
    )


def _how_it_stopped(status: InstanceStatus) -> str:
    # A parked instance has not ended: an operator's repair may resume it.
    if status is InstanceStatus.MANUAL_INTERVENTION:
        return "instance is parked in MANUAL_INTERVENTION, waiting for an operator"
    if status is InstanceStatus.FORWARD_RECOVERY_REQUIRED:
        return "instance stopped in FORWARD_RECOVERY_REQUIRED, only forward steps may finish it"
    return f"instance ended {status.value}"


def detail_of(store: LedgerReads, instance_id: str) -> InstanceDetail:
    record = store.get_instance(InstanceId(instance_id))
    if record is None:
        raise InstanceNotFoundError(instance_id=instance_id)
    journal = store.journal(record.instance_id, record.run)
    return InstanceDetail(
        instance=record,
        steps=[journal.steps[s] for s in sorted(journal.steps)],
        effects=[journal.effects[s] for s in sorted(journal.effects)],
        timeline=store.timeline(record.instance_id),
        inbox=store.inbox(record.instance_id),
        runs=store.runs(record.instance_id, latest=limits.RUNS_SHOWN_MAX),
        children=store.children(record.instance_id, limit=limits.PAGE_SIZE_DEFAULT),
        values=store.published_values(record.instance_id),
    )
