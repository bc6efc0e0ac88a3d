"""The changes from outside, each once: a request object, its role check, its audit record
(internal).

Every face carries out a start, a signal, a cancel, an effect's callback or a version's
retirement through the one function here that takes its request: the synchronous service
(:class:`~ledgerflow.operators.service.Operations`) as a local actor under the repairs'
authority, the asyncio service through it, and the HTTP API and the console as a principal
(:class:`~ledgerflow.operators.scoped.ScopedOperations`). What differs between them is only
*who asks* -- a :class:`Caller`: its name, its role check, which instances it sees, which
tenant it acts in -- never how the change, its refusal and its audit record are written.

Each function checks the caller first (a refusal is recorded with the caller's name and role,
then raised), then makes the change and its audit record in one transaction
(``store.transaction()`` in :mod:`~ledgerflow.operators.actions`): a death between the two
leaves neither.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypedDict

from ledgerflow.errors import (
    InstanceNotFoundError,
    NotAuthorizedError,
    PayloadError,
    ReservedNameError,
    UpdateRejectedError,
)
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.model.authority import ApiRole, Grant, Policy, VersionCommand
from ledgerflow.model.ids import DEFAULT_TENANT
from ledgerflow.model.repair import RepairKind
from ledgerflow.model.signal import signal_name
from ledgerflow.operators import actions
from ledgerflow.operators.upgrades import MigrationPlan, MoveReport, UpgradeRequest, Upgrades
from ledgerflow.operators.versions import Retirement, retire_version
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.core import StartOptions
from ledgerflow.runtime.engine import Delivered, DeliveryOutcome, Started
from ledgerflow.runtime.sync_engine import SyncEngine
from ledgerflow.storage.store import Store

__all__ = [
    "CANCEL",
    "COMPLETE_EFFECT",
    "RETIRE",
    "SIGNAL",
    "MIGRATE",
    "START",
    "UPGRADE",
    "CancelRequest",
    "Caller",
    "CompleteEffectRequest",
    "LocalCaller",
    "MigrateRequest",
    "Operation",
    "RetireRequest",
    "SignalRequest",
    "UpdateRequest",
    "StartExtras",
    "StartRequest",
    "UpgradeRequest",
    "Writer",
]


@dataclass(frozen=True, slots=True)
class Operation:
    """A change from outside as the role checks name it: its audit kind, the API role a
    principal needs, and the authority's grant a local actor needs (None: none)."""

    kind: str
    role: ApiRole
    grant: Grant | None


START = Operation(actions.START, ApiRole.SIGNALLER, None)
SIGNAL = Operation(actions.SIGNAL, ApiRole.SIGNALLER, None)
COMPLETE_EFFECT = Operation(actions.COMPLETE_EFFECT, ApiRole.SIGNALLER, None)
UPDATE = Operation(actions.UPDATE, ApiRole.SIGNALLER, None)
CANCEL = Operation(actions.CANCEL, ApiRole.OPERATOR, RepairKind.CANCEL)
RETIRE = Operation(actions.RETIRE_VERSION, ApiRole.ADMIN, VersionCommand.RETIRE)
# Moves to other code: no API route offers them; a principal would need the strongest role.
UPGRADE = Operation(actions.UPGRADE, ApiRole.ADMIN, VersionCommand.UPGRADE)
MIGRATE = Operation(actions.MIGRATE, ApiRole.ADMIN, VersionCommand.MIGRATE)


@dataclass(frozen=True, slots=True)
class StartRequest:
    """Start (or find) the instance of a business key (``tenant`` None: the caller's), with
    the start options (docs/programming-model.md): when (``start_at`` epoch seconds or
    ``start_in`` seconds: SCHEDULED until then), what a used key does (``if_running``,
    ``if_ended``), a debounce (``debounce_seconds``, ``debounce_max_seconds``: a start while
    the key's instance is pending replaces its input), and an event delivered in the start's
    transaction (``signal`` with its ``signal_event_id`` and ``signal_payload``:
    signal-with-start)."""

    workflow: str
    key: str
    input: Any = None
    version: int | None = None
    tenant: str | None = None
    start_at: float | None = None
    start_in: float | None = None
    if_running: str = "return"
    if_ended: str = "return"
    signal: str | None = None
    signal_event_id: str | None = None
    signal_payload: Any = None
    # The signal ends a delayed start's delay (it is due now).
    signal_wakes: bool = False
    # A debounced start (model/debounce.py): due once no start of the key came for this long,
    # never later than debounce_max_seconds after the window's first start.
    debounce_seconds: float | None = None
    debounce_max_seconds: float | None = None

    def options(self) -> dict[str, Any]:
        """The start options asked for (those not left at their defaults), as the audit
        record's arguments name them."""
        asked = {
            "start_at": self.start_at,
            "start_in": self.start_in,
            "if_running": None if self.if_running == "return" else self.if_running,
            "if_ended": None if self.if_ended == "return" else self.if_ended,
            "signal": self.signal,
            "signal_event_id": self.signal_event_id,
            "signal_wakes": self.signal_wakes or None,
            "debounce_seconds": self.debounce_seconds,
            "debounce_max_seconds": self.debounce_max_seconds,
        }
        return {name: value for name, value in asked.items() if value is not None}


class StartExtras(TypedDict, total=False):
    """The start options of a :class:`StartRequest`, as the services' ``start`` takes them."""

    start_at: float | None
    start_in: float | None
    if_running: str
    if_ended: str
    signal: str | None
    signal_event_id: str | None
    signal_payload: Any
    signal_wakes: bool
    debounce_seconds: float | None
    debounce_max_seconds: float | None


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """Ask an instance to handle an update; safe to repeat with the same ``update_id``."""

    instance_id: str
    name: str
    update_id: str
    payload: Any = None


@dataclass(frozen=True, slots=True)
class SignalRequest:
    """Deliver a signal, callback or approval; safe to repeat with the same ``event_id``."""

    instance_id: str
    name: str
    event_id: str
    payload: Any = None
    sender: str | None = None
    for_step: int | None = None
    run: int | None = None


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Ask for an instance to be cancelled (durable; the first request wins)."""

    instance_id: str
    reason: str
    compensate: bool = True


@dataclass(frozen=True, slots=True)
class CompleteEffectRequest:
    """A participant's callback for an asynchronous effect, by its idempotency key."""

    idempotency_key: str
    applied: bool
    evidence: Any = None
    reason: str | None = None
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class RetireRequest:
    """Retire a workflow version, with its evidence on the audit record."""

    workflow: str
    version: int
    reason: str


@dataclass(frozen=True, slots=True)
class MigrateRequest:
    """Move in-flight instances to another version under a declared plan of positions (a dry
    run is held to the role too, its refusal not recorded)."""

    plan: MigrationPlan
    dry_run: bool = False


class Caller(Protocol):
    """Who asks for a change: the name and role on its records, and the checks it is held to."""

    @property
    def actor(self) -> str:
        """The name on the audit record."""
        ...

    @property
    def role(self) -> str | None:
        """The role on the record of a refusal (None: none is held)."""
        ...

    def authorize(self, operation: Operation) -> str | None:
        """The role the change is recorded under; :class:`NotAuthorizedError` if refused."""
        ...

    def visible(self, instance_id: str) -> InstanceRecord:
        """The instance, if the caller sees it; else :class:`InstanceNotFoundError`."""
        ...

    def tenant(self, tenant: str | None) -> str:
        """The tenant a start acts in (``tenant`` None: the caller's)."""
        ...

    def acts_in(self, tenant: str) -> None:
        """:class:`NotAuthorizedError` unless the caller may act in ``tenant``."""
        ...

    def spans_tenants(self) -> None:
        """:class:`NotAuthorizedError` unless the caller acts for every tenant."""
        ...

    def sender(self, sender: str | None) -> str | None:
        """The sender an event is delivered under (:class:`NotAuthorizedError` if the caller
        may not speak for ``sender``)."""
        ...

    def seen(self, record: InstanceRecord) -> InstanceRecord:
        """An instance as the caller is shown it."""
        ...


class LocalCaller:
    """A local actor (the command line, Python code): sees every instance and tenant, speaks
    for any sender, and is held to the repairs' authority where a change needs a grant."""

    def __init__(self, actor: str, engine: SyncEngine, authority: Callable[[], Policy]) -> None:
        self._actor = actor
        self._engine = engine
        # Read when a change first needs a grant: a start or a signal never depends on it.
        self._authority = authority

    @property
    def actor(self) -> str:
        return self._actor

    @property
    def role(self) -> str | None:
        return None

    def authorize(self, operation: Operation) -> str | None:
        if operation.grant is None:
            return None
        return self._authority().grant_for(self._actor, operation.grant)

    def visible(self, instance_id: str) -> InstanceRecord:
        return self._engine.get(instance_id)

    def tenant(self, tenant: str | None) -> str:
        return DEFAULT_TENANT if tenant is None else tenant

    def acts_in(self, tenant: str) -> None:
        return None

    def spans_tenants(self) -> None:
        return None

    def sender(self, sender: str | None) -> str | None:
        return sender

    def seen(self, record: InstanceRecord) -> InstanceRecord:
        return record


class Writer:
    """The one implementation of each change from outside, on one store, for one caller."""

    def __init__(self, store: Store, engine: SyncEngine, clock: Clock, caller: Caller) -> None:
        self._store = store
        self._engine = engine
        self._clock = clock
        self._caller = caller

    @contextlib.contextmanager
    def _checked(
        self,
        kind: str,
        instance_id: str | None,
        target: str | None,
        *,
        reason: str,
        arguments: dict[str, Any],
        recorded: bool = True,
    ) -> Iterator[None]:
        """The checks of a change run inside: the one that refuses it is recorded first
        (unless not ``recorded``: a dry run writes nothing)."""
        try:
            yield
        except (NotAuthorizedError, ReservedNameError) as exc:
            if recorded:
                actions.record_refusal(
                    self._store, self._clock, actor=self._caller.actor, role=self._caller.role,
                    kind=kind, instance_id=instance_id, target=target, reason=reason,
                    arguments=arguments, error=exc,
                )  # fmt: skip
            raise

    def start(self, request: StartRequest) -> Started:
        """Start (or find) the instance; a repeat answers with it as it is now."""
        caller = self._caller
        tenant = caller.tenant(request.tenant)
        workflow, key = request.workflow, request.key
        target, reason = f"{workflow}:{key}", f"start {workflow} for key {key}"
        arguments = {"workflow": workflow, "key": key, "version": request.version, "tenant": tenant}
        arguments.update(request.options())
        # A start refused names no instance: none may exist, and none of the caller's.
        with self._checked(actions.START, None, target, reason=reason, arguments=arguments):
            role = caller.authorize(START)
            caller.acts_in(tenant)
            if request.signal is not None:
                signal_name(request.signal)
        options: StartOptions = {
            "key": key,
            "input": request.input,
            "version": request.version,
            "tenant": tenant,
            "start_at": request.start_at,
            "start_in": request.start_in,
            "if_running": request.if_running,  # type: ignore[typeddict-item] # checked there
            "if_ended": request.if_ended,  # type: ignore[typeddict-item] # checked there
            "debounce_seconds": request.debounce_seconds,
            "debounce_max_seconds": request.debounce_max_seconds,
        }
        with self._store.transaction():
            if request.signal is None:
                started = self._engine.start(workflow, **options)
                # A start debounced into the pending instance changed its input and time.
                changed = started.created or started.debounced
            else:
                if request.signal_event_id is None:
                    raise PayloadError("a start with a signal needs the signal's event id")
                both = self._engine.signal_with_start(
                    workflow,
                    signal=request.signal,
                    event_id=request.signal_event_id,
                    payload=request.signal_payload,
                    sender=caller.sender(None),
                    wake=request.signal_wakes,
                    **options,
                )
                started = both.started
                changed = started.created or both.delivered.outcome is not DeliveryOutcome.DUPLICATE
            actions.record_action(
                self._store,
                self._clock,
                actor=caller.actor,
                role=role,
                kind=actions.START,
                instance_id=started.instance_id,
                target=target,
                outcome="applied" if changed else "no-op",
                reason=reason,
                arguments=arguments,
            )
        return replace(started, instance=caller.seen(started.instance))

    def cancel(self, request: CancelRequest) -> InstanceRecord:
        """Ask for the cancel (:func:`~ledgerflow.operators.actions.audited_cancel`)."""
        record = self._caller.visible(request.instance_id)
        arguments = {"compensate": request.compensate}
        with self._checked(
            actions.CANCEL, record.instance_id, None, reason=request.reason, arguments=arguments
        ):
            role = self._caller.authorize(CANCEL)
        return actions.audited_cancel(
            self._store,
            self._engine,
            self._clock,
            actor=self._caller.actor,
            role=role,
            instance_id=request.instance_id,
            reason=request.reason,
            compensate=request.compensate,
        )

    def signal(self, request: SignalRequest) -> Delivered:
        """Deliver the event under the caller's sender, with its audit record."""
        caller, name, event_id = self._caller, request.name, request.event_id
        record = caller.visible(request.instance_id)
        with self._checked(
            actions.SIGNAL,
            record.instance_id,
            f"{name} {event_id}",
            reason=f"{actions.SIGNAL} {name}",
            arguments={"name": name, "event_id": event_id, "sender": request.sender},
        ):
            role = caller.authorize(SIGNAL)
            sender = caller.sender(request.sender)
            signal_name(name)
        deliver = functools.partial(
            self._engine.signal,
            request.instance_id,
            name,
            event_id=event_id,
            payload=request.payload,
            sender=sender,
            for_step=request.for_step,
            run=request.run,
        )
        return actions.audited_delivery(
            self._store, self._clock, deliver, actor=caller.actor, role=role, kind=actions.SIGNAL
        )

    def update(self, request: UpdateRequest) -> Delivered:
        """Store the update request (after its validator) with its audit record; a repeated
        ``update_id`` stores nothing (``no-op`` on the record)."""
        caller, name, update_id = self._caller, request.name, request.update_id
        record = caller.visible(request.instance_id)
        with self._checked(
            actions.UPDATE, record.instance_id, f"{name} {update_id}",
            reason=f"{actions.UPDATE} {name}", arguments={"name": name, "update_id": update_id},
        ):  # fmt: skip
            role = caller.authorize(UPDATE)
        ask = functools.partial(
            self._engine.request_update, record, name, request.payload, update_id=update_id
        )
        try:
            return actions.audited_delivery(
                self._store, self._clock, ask, actor=caller.actor, role=role, kind=actions.UPDATE
            )
        except UpdateRejectedError as refused:
            # Nothing of the request was kept (its transaction rolled back); its refusal is
            # on the record, as every refused change is.
            actions.record_refusal(
                self._store, self._clock, actor=caller.actor, role=role, kind=actions.UPDATE,
                instance_id=record.instance_id, target=f"{name} {update_id}",
                reason=f"{actions.UPDATE} {name}",
                arguments={"name": name, "update_id": update_id}, error=refused,
            )  # fmt: skip
            raise

    def complete_effect(self, request: CompleteEffectRequest) -> Delivered:
        """Deliver the callback to the effect's step, with its audit record."""
        key = request.idempotency_key
        effect = self._store.find_effect(key)
        try:
            record = self._caller.visible(effect.instance_id) if effect else None
        except InstanceNotFoundError:
            record = None
        if record is None:
            raise InstanceNotFoundError(f"no effect has the idempotency key {key!r}", key=key)
        with self._checked(
            actions.COMPLETE_EFFECT,
            record.instance_id,
            key,
            reason=f"{actions.COMPLETE_EFFECT} {key}",
            arguments={"idempotency_key": key, "applied": request.applied},
        ):
            role = self._caller.authorize(COMPLETE_EFFECT)
        deliver = functools.partial(
            self._engine.complete_effect,
            key,
            applied=request.applied,
            evidence=request.evidence,
            reason=request.reason,
            event_id=request.event_id,
        )
        return actions.audited_delivery(
            self._store,
            self._clock,
            deliver,
            actor=self._caller.actor,
            role=role,
            kind=actions.COMPLETE_EFFECT,
        )

    def retire(self, request: RetireRequest) -> Retirement:
        """Retire the version (:func:`~ledgerflow.operators.versions.retire_version`: refused,
        on the record, while instances in flight are pinned to it)."""
        workflow, version = request.workflow, request.version
        with self._checked(
            actions.RETIRE_VERSION,
            None,
            f"{workflow}@{version}",
            reason=request.reason,
            arguments={"workflow": workflow, "version": version},
        ):
            role = self._caller.authorize(RETIRE)
            self._caller.spans_tenants()
        return retire_version(
            self._store,
            self._clock,
            workflow=workflow,
            version=version,
            actor=self._caller.actor,
            role=role,
            reason=request.reason,
        )

    def upgrade(self, upgrades: Upgrades, request: UpgradeRequest) -> MoveReport:
        """Move the version's instances (:meth:`~ledgerflow.operators.upgrades.Upgrades.
        upgrade`: each move in one transaction with its audit record)."""
        target = f"{request.workflow}@{request.version}"
        role = None
        if not request.dry_run:
            with self._checked(
                actions.UPGRADE,
                None,
                target,
                reason=f"upgrade {target} to {request.to_fingerprint}",
                arguments={"to_fingerprint": request.to_fingerprint},
            ):
                role = self._caller.authorize(UPGRADE)
        return upgrades.upgrade(request, actor=self._caller.actor, role=role)

    def migrate(self, upgrades: Upgrades, request: MigrateRequest) -> MoveReport:
        """Move instances under the plan (:meth:`~ledgerflow.operators.upgrades.Upgrades.
        migrate`)."""
        plan = request.plan
        target = f"{plan.workflow}@{plan.from_version}"
        with self._checked(
            actions.MIGRATE,
            None,
            target,
            reason=f"migrate {target} to v{plan.to_version}",
            arguments={"to_version": plan.to_version},
            recorded=not request.dry_run,
        ):
            role = self._caller.authorize(MIGRATE)
        return upgrades.migrate(plan, actor=self._caller.actor, role=role, dry_run=request.dry_run)
