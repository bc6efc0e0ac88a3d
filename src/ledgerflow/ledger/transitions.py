"""How every journal write is made: from the record it changes and the event that changes it
(internal).

A write names its event; the state it reaches comes from the machine's table, never from the
caller, and only the columns the transition changes are named (the rest are carried over from
the record as it is). The runtime's drivers and the operators' repairs build all their step,
effect and instance writes here, and the store checks each one against the table again
(:meth:`~ledgerflow.model.machine.Machine.check_write`) before it touches a row.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import TypeVar

from ledgerflow.ledger.records import (
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    StepRecord,
    StepWrite,
)
from ledgerflow.model.effect import EFFECT_MACHINE, EffectEvent, EffectState
from ledgerflow.model.ids import (
    EffectId,
    Generation,
    IdempotencyKey,
    StepSeq,
    command_id,
)
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceEvent, InstanceStatus
from ledgerflow.model.step import STEP_MACHINE, StepEvent, StepKind, StepStatus


class Keep(enum.Enum):
    """The value of a column a transition leaves as it was."""

    KEEP = "keep"


KEEP = Keep.KEEP
T = TypeVar("T")


def _or(value: T | Keep, current: T) -> T:
    return current if value is KEEP else value


# -- steps -------------------------------------------------------------------------------------


def new_step(
    instance: InstanceRecord,
    seq: StepSeq,
    event: StepEvent,
    *,
    kind: StepKind,
    name: str,
    input: str | None,
    retry_policy: str,
    now: float,
    attempt: int = 1,
    output: str | None = None,
    error: str | None = None,
    next_attempt_at: float | None = None,
    attempt_errors: str | None = None,
    detail: str | None = None,
    error_traceback: str | None = None,
) -> StepWrite:
    """The first write of a step: from no row (NEW) by ``event``."""
    record = StepRecord(
        instance_id=instance.instance_id,
        run=instance.run,
        seq=seq,
        kind=kind,
        name=name,
        command_id=command_id(instance.instance_id, instance.run, seq),
        status=STEP_MACHINE.check(StepStatus.NEW, event),
        attempt=attempt,
        input=input,
        output=output,
        error=error,
        retry_policy=retry_policy,
        next_attempt_at=next_attempt_at,
        generation=instance.generation,
        updated_at=now,
        attempt_errors=attempt_errors,
        error_traceback=error_traceback,
    )
    return StepWrite(record=record, expected=StepStatus.NEW, event=event, detail=detail)


def step_change(
    current: StepRecord,
    event: StepEvent,
    *,
    now: float,
    generation: Generation,
    attempt: int | Keep = KEEP,
    output: str | Keep | None = KEEP,
    error: str | Keep | None = KEEP,
    next_attempt_at: float | Keep | None = KEEP,
    attempt_errors: str | Keep | None = KEEP,
    detail: str | None = None,
    error_traceback: str | Keep | None = KEEP,
) -> StepWrite:
    """``current`` moved by ``event``; the columns named change, the others are kept."""
    record = dataclasses.replace(
        current,
        status=STEP_MACHINE.check(current.status, event),
        attempt=_or(attempt, current.attempt),
        output=_or(output, current.output),
        error=_or(error, current.error),
        next_attempt_at=_or(next_attempt_at, current.next_attempt_at),
        attempt_errors=_or(attempt_errors, current.attempt_errors),
        error_traceback=_or(error_traceback, current.error_traceback),
        generation=generation,
        updated_at=now,
    )
    return StepWrite(record=record, expected=current.status, event=event, detail=detail)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepIdentity:
    """What a step is, whatever its state: the columns its first write sets and no later write
    changes (a driver carries one for the step it drives)."""

    instance: InstanceRecord
    seq: StepSeq
    kind: StepKind
    name: str
    input: str | None
    retry_policy: str


def step_write(
    identity: StepIdentity,
    current: StepRecord | None,
    event: StepEvent,
    *,
    now: float,
    attempt: int,
    output: str | None = None,
    error: str | None = None,
    next_attempt_at: float | None = None,
    attempt_errors: str | Keep | None = KEEP,
    error_traceback: str | None = None,
) -> StepWrite:
    """The step moved by ``event``: its first write when there is no row yet, else a change of
    ``current``. Output, error, its traceback and due time are what is given; attempt errors
    are kept unless given."""
    if current is None:
        return new_step(
            identity.instance,
            identity.seq,
            event,
            kind=identity.kind,
            name=identity.name,
            input=identity.input,
            retry_policy=identity.retry_policy,
            now=now,
            attempt=attempt,
            output=output,
            error=error,
            next_attempt_at=next_attempt_at,
            attempt_errors=None if attempt_errors is KEEP else attempt_errors,
            error_traceback=error_traceback,
        )
    return step_change(
        current,
        event,
        now=now,
        generation=identity.instance.generation,
        attempt=attempt,
        output=output,
        error=error,
        next_attempt_at=next_attempt_at,
        attempt_errors=attempt_errors,
        error_traceback=error_traceback,
    )


# -- effects -----------------------------------------------------------------------------------


def new_effect(
    instance: InstanceRecord,
    seq: StepSeq,
    event: EffectEvent,
    *,
    effect_id: EffectId,
    participant: str,
    operation: str,
    classification: str,
    idempotency_key: IdempotencyKey,
    payload: str,
    now: float,
    reason: str | None = None,
    compensates: EffectId | None = None,
    detail: str | None = None,
    contract_version: str | None = None,
) -> EffectWrite:
    """The first write of an effect: its intent, or a compensation's place in the plan."""
    record = EffectRecord(
        effect_id=effect_id,
        instance_id=instance.instance_id,
        run=instance.run,
        seq=seq,
        participant=participant,
        operation=operation,
        classification=classification,
        idempotency_key=idempotency_key,
        state=EFFECT_MACHINE.check(EffectState.NEW, event),
        attempt=1,
        doubt=0,
        payload=payload,
        evidence=None,
        reason=reason,
        generation=instance.generation,
        updated_at=now,
        compensates=compensates,
        contract_version=contract_version,
    )
    return EffectWrite(
        record=record, expected=EffectState.NEW, event=event, detail=detail or reason
    )


def effect_change(
    current: EffectRecord,
    event: EffectEvent,
    *,
    now: float,
    generation: Generation,
    attempt: int | Keep = KEEP,
    doubt: int | Keep = KEEP,
    evidence: str | Keep | None = KEEP,
    reason: str | Keep | None = KEEP,
    attempt_errors: str | Keep | None = KEEP,
    lookup_failures: int | Keep = KEEP,
    detail: str | None = None,
) -> EffectWrite:
    """``current`` moved by ``event``; its identity, key and payload never change."""
    record = dataclasses.replace(
        current,
        state=EFFECT_MACHINE.check(current.state, event),
        attempt=_or(attempt, current.attempt),
        doubt=_or(doubt, current.doubt),
        evidence=_or(evidence, current.evidence),
        reason=_or(reason, current.reason),
        attempt_errors=_or(attempt_errors, current.attempt_errors),
        lookup_failures=_or(lookup_failures, current.lookup_failures),
        generation=generation,
        updated_at=now,
    )
    return EffectWrite(
        record=record, expected=current.state, event=event, detail=detail or record.reason
    )


# -- instances ---------------------------------------------------------------------------------


def instance_change(
    current: InstanceStatus,
    event: InstanceEvent,
    *,
    result: str | None = None,
    reason_code: str | None = None,
    reason: str | None = None,
    release: bool = False,
    available_at: float | None = None,
    cause: str | None = None,
    detail: str | None = None,
) -> InstanceWrite:
    """The instance moved from ``current`` by ``event`` (see :class:`InstanceWrite`)."""
    return InstanceWrite(
        status=INSTANCE_MACHINE.check(current, event),
        expected=current,
        event=event,
        result=result,
        reason_code=reason_code,
        reason=reason,
        release=release,
        available_at=available_at,
        cause=cause,
        detail=detail,
    )
