"""Between the store's records and the repair planner's views, both ways (internal).

:func:`read_snapshot` reads what planning needs (the instance, its current run's journal and
where its timeline says it was parked from) and turns it into the model's small views;
:func:`repair_writes` turns a plan back into the store's checked writes, each built from the
current record so that identities (command id, idempotency key, payload) are never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.errors import InstanceNotFoundError
from ledgerflow.ledger.records import (
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    Journal,
    StepWrite,
)
from ledgerflow.ledger.transitions import effect_change, instance_change, new_step, step_change
from ledgerflow.model.ids import InstanceId, StepSeq
from ledgerflow.model.instance import FINAL_STATUSES, TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.repair import (
    EffectChange,
    EffectView,
    InstanceView,
    Ledger,
    RepairPlan,
    StepChange,
    StepView,
)
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.storage.store import LedgerReads


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    instance: InstanceRecord
    journal: Journal
    ledger: Ledger


def _parked_from(store: LedgerReads, instance: InstanceRecord) -> InstanceStatus | None:
    if instance.status is not InstanceStatus.MANUAL_INTERVENTION:
        return None
    for entry in reversed(store.timeline(instance.instance_id)):
        if (
            entry.subject == "instance"
            and entry.to_state == InstanceStatus.MANUAL_INTERVENTION.value
        ):
            return InstanceStatus(entry.from_state) if entry.from_state else None
    return None


def read_snapshot(store: LedgerReads, instance_id: InstanceId, *, now: float) -> Snapshot:
    """The instance and its current run as planning sees them (``now`` judges leases)."""
    instance = store.get_instance(instance_id)
    if instance is None:
        # Not a refusal of the repair: there is nothing to repair (LF400, as for every reader).
        raise InstanceNotFoundError(instance_id=instance_id)
    journal = store.journal(instance.instance_id, instance.run)
    live = (
        instance.owner is not None
        and instance.lease_expires_at is not None
        and instance.lease_expires_at > now
    )
    view = InstanceView(
        instance_id=instance.instance_id,
        status=instance.status,
        generation=instance.generation,
        held_by=instance.owner if live else None,
        parked_from=_parked_from(store, instance),
        cancel_requested=instance.cancel_requested_at is not None,
        cancel_compensate=instance.cancel_compensate,
    )
    steps = {
        int(s.seq): StepView(
            seq=s.seq, kind=s.kind, name=s.name, status=s.status, attempt=s.attempt
        )
        for s in journal.steps.values()
    }
    effects = {
        int(e.seq): EffectView(
            seq=e.seq,
            participant=e.participant,
            operation=e.operation,
            classification=e.classification,
            idempotency_key=e.idempotency_key,
            state=e.state,
            attempt=e.attempt,
            doubt=e.doubt,
            compensates=e.compensates,
        )
        for e in journal.effects.values()
    }
    return Snapshot(
        instance=instance,
        journal=journal,
        ledger=Ledger(
            instance=view,
            steps=steps,
            effects=effects,
            live_wait_children=_live_wait_children(store, instance),
        ),
    )


def _live_wait_children(store: LedgerReads, instance: InstanceRecord) -> tuple[str, ...]:
    """The children of ``instance`` started with on_parent_end="wait" that have not ended
    (read only while the instance itself has not ended; a run's children are its steps, so
    one run's at most)."""
    if instance.status in FINAL_STATUSES:
        return ()
    return tuple(
        c.instance_id
        for c in store.children(instance.instance_id, limit=limits.STEPS_PER_INSTANCE_MAX)
        if c.on_parent_end == "wait" and c.status not in TERMINAL_STATUSES
    )


def _step_write(snapshot: Snapshot, change: StepChange, now: float) -> StepWrite:
    seq = StepSeq(change.seq)
    completed = change.status is StepStatus.COMPLETED
    due = now if change.due_now else None
    if change.expected is StepStatus.NEW:
        # A compensation the operator starts before its driver ever did: the same name,
        # command id and input the driver would have written.
        effect = snapshot.journal.effects[seq]
        original = snapshot.journal.effects[StepSeq(-seq)]
        original_step = snapshot.journal.steps.get(StepSeq(-seq))
        return new_step(
            snapshot.instance,
            seq,
            change.event,
            kind=StepKind.COMPENSATION,
            name=f"compensate {original.participant}.{original.operation}",
            input=effect.payload,
            retry_policy=original_step.retry_policy if original_step else "{}",
            now=now,
            attempt=change.attempt,
            output=change.output if completed else None,
            error=None if completed else change.error,
            next_attempt_at=due,
        )
    current = snapshot.journal.steps[seq]
    return step_change(
        current,
        change.event,
        now=now,
        generation=current.generation,
        attempt=change.attempt,
        output=change.output if completed else None,
        error=None if completed else (change.error or current.error),
        next_attempt_at=due,
    )


def _effect_write(snapshot: Snapshot, change: EffectChange, now: float) -> EffectWrite:
    current: EffectRecord = snapshot.journal.effects[StepSeq(change.seq)]
    return effect_change(
        current,
        change.event,
        now=now,
        generation=current.generation,
        attempt=change.attempt,
        doubt=change.doubt,
        evidence=change.evidence,
        reason=change.reason,
    )


def repair_writes(
    snapshot: Snapshot, plan: RepairPlan, *, now: float
) -> tuple[StepWrite | EffectWrite | InstanceWrite, ...]:
    """The plan as the store's writes: effects first (a step's completion follows its effect's
    outcome, as in a worker's commit), then steps, then the instance."""
    writes: list[StepWrite | EffectWrite | InstanceWrite] = [
        _effect_write(snapshot, e, now) for e in plan.effects
    ]
    writes.extend(_step_write(snapshot, s, now) for s in plan.steps)
    if plan.instance is not None:
        i = plan.instance
        writes.append(
            instance_change(
                i.expected,
                i.event,
                result=i.result,
                reason_code=i.reason_code,
                reason=i.reason,
                # Kept only where nothing else led here first (see InstanceWrite.cause).
                cause=f"operator repair: {i.reason}",
            )
        )
    return tuple(writes)
