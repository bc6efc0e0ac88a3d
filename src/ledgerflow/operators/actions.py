"""The audit records of what is not a repair: starts, cancels, signals, callbacks, tokens
(internal).

Repairs write their own audit records (:mod:`ledgerflow.operators.repairs`), and so does a
version's retirement (:mod:`ledgerflow.operators.versions`, in the retirement's transaction;
its kind is listed here). Everything else that changes state from outside -- a start, a cancel
request, a signal or approval, an effect's callback, a token made or revoked -- is recorded
here by whoever carried it out (the operators' service), with the principal that asked, the
role it acted under and what came of it, so that the audit log answers "who did this" for
every change, whichever face it came through.

An action's record has the shape of a repair's: ``kind`` is one of :data:`ACTION_KINDS`,
``outcome`` is ``applied``, ``no-op`` (a repeat that changed nothing) or ``refused``, and
``plan`` holds the request's arguments as JSON. A change refused before it is made is
recorded too (:func:`record_refusal`), by the one implementation of each change
(:mod:`ledgerflow.operators.commands`), which holds its caller to a role first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from ledgerflow.errors import InstanceNotFoundError, LedgerflowError
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.model.authority import VersionCommand
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime import adoption, faults
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.engine import Delivered, DeliveryOutcome
from ledgerflow.runtime.sync_engine import SyncEngine
from ledgerflow.storage.store import OperatorStore

START = "start"
CANCEL = "cancel"
SIGNAL = "signal"
COMPLETE_EFFECT = "complete-effect"
UPDATE = "update"
TOKEN_CREATE = "token-create"
TOKEN_REVOKE = "token-revoke"
# Moves of in-flight instances to other code (operators/upgrades.py), each with its replay.
UPGRADE = VersionCommand.UPGRADE.value
MIGRATE = VersionCommand.MIGRATE.value
# Written by ledgerflow.operators.versions, with the retirement in one transaction.
RETIRE_VERSION = VersionCommand.RETIRE.value
# Written by a worker's adoption, in the claim's transaction (runtime/adoption.py).
ADOPT = adoption.ADOPT
# A schedule's changes (ledgerflow.operators.schedules).
SCHEDULE_PAUSE = "schedule-pause"
SCHEDULE_RESUME = "schedule-resume"
SCHEDULE_DELETE = "schedule-delete"
SCHEDULE_TRIGGER = "schedule-trigger"
SCHEDULE_BACKFILL = "schedule-backfill"
# An effect limit's changes (ledgerflow.operators.flow).
FLOW_LIMIT_SET = "flow-limit-set"
FLOW_LIMIT_REMOVE = "flow-limit-remove"
ACTION_KINDS = (
    START,
    CANCEL,
    SIGNAL,
    COMPLETE_EFFECT,
    UPDATE,
    TOKEN_CREATE,
    TOKEN_REVOKE,
    UPGRADE,
    MIGRATE,
    RETIRE_VERSION,
    ADOPT,
    SCHEDULE_PAUSE,
    SCHEDULE_RESUME,
    SCHEDULE_DELETE,
    SCHEDULE_TRIGGER,
    SCHEDULE_BACKFILL,
    FLOW_LIMIT_SET,
    FLOW_LIMIT_REMOVE,
)
# An action's reason and refusal are kept to this many characters.
ACTION_TEXT_MAX = 1000


def record_action(
    store: OperatorStore,
    clock: Clock,
    *,
    actor: str,
    role: str | None,
    kind: str,
    instance_id: str | None,
    target: str | None,
    outcome: str,
    reason: str,
    arguments: dict[str, Any],
    refusal: str | None = None,
) -> int:
    """Append one action's audit record; return its id. A change's record is appended in the
    change's own transaction (``store.transaction()``): both are on the ledger, or neither."""
    # The window between a change and its record: a death here must leave neither.
    if faults.plan is not None:
        faults.point("audit.before_record", kind=kind, outcome=outcome, target=target)
    plan = json.dumps(arguments, sort_keys=True, default=str)
    identity = json.dumps([kind, instance_id, target, plan], sort_keys=True)
    entry = AuditEntry(
        actor=actor,
        role=role,
        kind=kind,
        instance_id=InstanceId(instance_id) if instance_id is not None else None,
        target=target,
        fingerprint=hashlib.sha256(identity.encode()).hexdigest(),
        outcome=outcome,
        reason=(reason.strip() or "(none given)")[:ACTION_TEXT_MAX],
        evidence=None,
        plan=plan,
        refusal=refusal[:ACTION_TEXT_MAX] if refusal else None,
    )
    return store.append_audit(entry, now=clock.now())


def record_refusal(
    store: OperatorStore,
    clock: Clock,
    *,
    actor: str,
    kind: str,
    instance_id: str | None,
    target: str | None,
    reason: str,
    arguments: dict[str, Any],
    error: LedgerflowError,
    role: str | None = None,
) -> int:
    """Append the record of a change refused before it was made: who asked, what, and why
    not (the error's text)."""
    return record_action(
        store,
        clock,
        actor=actor.strip() or "(anonymous)",
        role=role,
        kind=kind,
        instance_id=instance_id,
        target=target,
        outcome="refused",
        reason=reason,
        arguments=arguments,
        refusal=str(error),
    )


def audited_cancel(
    store: OperatorStore,
    engine: SyncEngine,
    clock: Clock,
    *,
    actor: str,
    role: str | None,
    instance_id: str,
    reason: str,
    compensate: bool,
) -> InstanceRecord:
    """Ask for a cancel (the engine's rules: durable, the first request wins) and record who
    asked, in the request's transaction: ``applied`` when this call made the request, ``no-op``
    when one stood already, ``refused`` (then re-raised; nothing was changed) when the instance
    had ended or the request was not valid.

    Which of the first two it was is the store's answer, given in the request's own
    transaction: an earlier read could not tell, since another caller may commit its request
    between that read and this one (two racing cancels would both be "applied")."""
    arguments = {"compensate": compensate}
    try:
        with store.transaction():
            requested = engine.request_cancel(instance_id, reason=reason, compensate=compensate)
            record_action(
                store,
                clock,
                actor=actor,
                role=role,
                kind=CANCEL,
                instance_id=requested.instance.instance_id,
                target=None,
                outcome="applied" if requested.recorded else "no-op",
                reason=reason,
                arguments=arguments,
            )
    except InstanceNotFoundError:
        raise
    except LedgerflowError as exc:
        # On the record of the instance asked about (an unknown one is not found, unrecorded).
        known = engine.get(instance_id)
        record_refusal(
            store,
            clock,
            actor=actor,
            role=role,
            kind=CANCEL,
            instance_id=known.instance_id,
            target=None,
            reason=reason,
            arguments=arguments,
            error=exc,
        )
        raise
    return requested.instance


def audited_delivery(
    store: OperatorStore,
    clock: Clock,
    deliver: Callable[[], Delivered],
    *,
    actor: str,
    role: str | None,
    kind: str = SIGNAL,
) -> Delivered:
    """Deliver an event (``deliver``: the engine's signal or callback) and record it and what
    became of it, in one transaction: both are on the ledger, or neither."""
    with store.transaction():
        delivered = deliver()
        record_delivery(store, clock, delivered, actor=actor, role=role, kind=kind)
    return delivered


def record_delivery(
    store: OperatorStore,
    clock: Clock,
    delivered: Delivered,
    *,
    actor: str,
    role: str | None,
    kind: str = SIGNAL,
) -> int:
    """Record a signal or a callback and what became of it: ``applied`` (accepted),
    ``no-op`` (a repeat) or ``refused`` (too late, ended, not an approver)."""
    delivery = delivered.delivery
    outcome = {DeliveryOutcome.ACCEPTED: "applied", DeliveryOutcome.DUPLICATE: "no-op"}
    refused = (
        delivery.state is DeliveryState.REJECTED
        and delivered.outcome is not DeliveryOutcome.DUPLICATE
    )
    return record_action(
        store,
        clock,
        actor=actor,
        role=role,
        kind=kind,
        instance_id=delivery.instance_id,
        target=f"{delivery.name} {delivery.event_id}",
        outcome="refused" if refused else outcome.get(delivered.outcome, "refused"),
        reason=f"{kind} {delivery.name}: {delivered.outcome.value}",
        arguments={"name": delivery.name, "event_id": delivery.event_id, "sender": delivery.sender},
        refusal=delivery.reason if refused else None,
    )
