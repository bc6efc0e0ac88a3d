"""Rows to records and back, with the invariants every read checks (internal).

A row that breaks an invariant was not written by this engine's rules (a hand edit, a bug, a
foreign writer): it is reported as :class:`~ledgerflow.errors.StorageCorruptError` naming the
row, instead of being acted on.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from ledgerflow.errors import IllegalTransitionError, StorageCorruptError
from ledgerflow.model.effect import EffectState
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
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.storage.records import Delivery, EffectRecord, InstanceRecord, StepRecord

Row = Mapping[str, Any]
R = TypeVar("R")


def plain_record(kind: type[R], row: Row) -> R:
    """A record of plain values (no enum, no invariant to check) from the row's columns of the
    same names, as the driver reads them: both drivers give the schema's integers, reals and
    texts as int, float and str, which is what these records hold."""
    build = cast(Callable[..., R], kind)
    return build(**{item.name: row[item.name] for item in dataclasses.fields(cast(Any, kind))})


def fields(record: Any) -> dict[str, Any]:
    """A record as query parameters: enums by their value, everything else as it is."""
    out: dict[str, Any] = {}
    for name in record.__dataclass_fields__:
        value = getattr(record, name)
        out[name] = value.value if isinstance(value, enum.Enum) else value
    return out


def _build_instance(r: Row) -> InstanceRecord:
    return InstanceRecord(
        instance_id=InstanceId(r["instance_id"]),
        tenant=TenantId(r["tenant"]),
        workflow_name=r["workflow_name"],
        workflow_version=int(r["workflow_version"]),
        fingerprint=r["fingerprint"],
        business_key=BusinessKey(r["business_key"]),
        run=RunNumber(int(r["run"])),
        status=InstanceStatus(r["status"]),
        owner=WorkerId(r["owner"]) if r["owner"] is not None else None,
        generation=Generation(int(r["generation"])),
        lease_expires_at=r["lease_expires_at"],
        available_at=float(r["available_at"]),
        input=r["input"],
        result=r["result"],
        reason_code=r["reason_code"],
        reason=r["reason"],
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
        cancel_requested_at=r["cancel_requested_at"],
        cancel_reason=r["cancel_reason"],
        cancel_compensate=r["cancel_compensate"] != 0,
        lease_expiries=int(r["lease_expiries"]),
        cause=r["cause"],
        cancel_outcome=r["cancel_outcome"],
    )


def _build_step(r: Row) -> StepRecord:
    return StepRecord(
        instance_id=InstanceId(r["instance_id"]),
        run=RunNumber(int(r["run"])),
        seq=StepSeq(int(r["seq"])),
        kind=StepKind(r["kind"]),
        name=r["name"],
        command_id=CommandId(r["command_id"]),
        status=StepStatus(r["status"]),
        attempt=int(r["attempt"]),
        input=r["input"],
        output=r["output"],
        error=r["error"],
        retry_policy=r["retry_policy"],
        next_attempt_at=r["next_attempt_at"],
        generation=Generation(int(r["generation"])),
        updated_at=float(r["updated_at"]),
        attempt_errors=r["attempt_errors"],
    )


def _build_effect(r: Row) -> EffectRecord:
    return EffectRecord(
        effect_id=EffectId(r["effect_id"]),
        instance_id=InstanceId(r["instance_id"]),
        run=RunNumber(int(r["run"])),
        seq=StepSeq(int(r["seq"])),
        participant=r["participant"],
        operation=r["operation"],
        classification=r["classification"],
        idempotency_key=IdempotencyKey(r["idempotency_key"]),
        state=EffectState(r["state"]),
        attempt=int(r["attempt"]),
        doubt=int(r["doubt"]),
        payload=r["payload"],
        evidence=r["evidence"],
        reason=r["reason"],
        generation=Generation(int(r["generation"])),
        updated_at=float(r["updated_at"]),
        compensates=EffectId(r["compensates"]) if r["compensates"] is not None else None,
        attempt_errors=r["attempt_errors"],
        lookup_failures=int(r["lookup_failures"]),
    )


def _checked(
    table: str,
    r: Row,
    key: str,
    build: Callable[[Row], R],
    invariant: Callable[[R], str | None],
) -> R:
    try:
        ident = r[key]
    except (KeyError, IndexError):
        ident = "?"
    try:
        record = build(r)
    except (KeyError, ValueError, TypeError) as exc:
        raise StorageCorruptError(f"corrupt {table} row {ident}: {exc}", row=ident) from None
    broken = invariant(record)
    if broken is not None:
        raise StorageCorruptError(f"corrupt {table} row {ident}: {broken}", row=ident)
    return record


def instance_invariant(i: InstanceRecord) -> str | None:
    if i.status in TERMINAL_STATUSES and i.owner is not None:
        return f"{i.status.value} but still owned by {i.owner}"
    if i.status is InstanceStatus.SUCCEEDED and i.result is None:
        return "SUCCEEDED without a result"
    if i.generation < 0:
        return "negative generation"
    return None


def step_invariant(s: StepRecord) -> str | None:
    if s.attempt < 1:
        return f"attempt {s.attempt}"
    if s.status is StepStatus.NEW:
        return "status NEW is never stored"
    if s.status is StepStatus.COMPLETED and s.output is None:
        return "COMPLETED without an output"
    if s.status is StepStatus.RETRY_SCHEDULED and s.next_attempt_at is None:
        return "RETRY_SCHEDULED without a due time"
    return None


def effect_invariant(e: EffectRecord) -> str | None:
    if e.attempt < 1:
        return f"attempt {e.attempt}"
    if e.state is EffectState.NEW:
        return "state NEW is never stored"
    if e.state is EffectState.CONFIRMED and e.evidence is None:
        return "CONFIRMED without evidence"
    if not 0 <= e.doubt <= e.attempt:
        return f"doubt {e.doubt} outside 0..{e.attempt}"
    if e.state is EffectState.FAILED and e.doubt:
        return f"FAILED while attempt {e.doubt} is in doubt"
    return None


def instance_from_row(r: Row) -> InstanceRecord:
    return _checked("lf_instances", r, "instance_id", _build_instance, instance_invariant)


def step_from_row(r: Row) -> StepRecord:
    return _checked("lf_steps", r, "command_id", _build_step, step_invariant)


def effect_from_row(r: Row) -> EffectRecord:
    return _checked("lf_effects", r, "effect_id", _build_effect, effect_invariant)


def refuse_broken(broken: str | None, kind: str, ident: str) -> None:
    """The same invariants, asserted before a write: a row every read would refuse is never
    written."""
    if broken is not None:
        raise IllegalTransitionError(f"refused write to {kind} {ident}: it would be {broken}")


def delivery_from_row(r: Row) -> Delivery:
    try:
        return Delivery(
            instance_id=InstanceId(r["instance_id"]),
            event_id=r["event_id"],
            name=r["name"],
            payload=r["payload"],
            sender=r["sender"],
            for_seq=r["for_seq"],
            received_at=float(r["received_at"]),
            state=r["state"],
            reason=r["reason"],
            consumed_seq=r["consumed_seq"],
            refusal=r["refusal"],
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise StorageCorruptError(f"corrupt lf_inbox row: {exc}") from None
