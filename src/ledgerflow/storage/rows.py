"""Rows to records and back, with the invariants every read checks (internal).

A row that breaks an invariant was not written by this engine's rules (a hand edit, a bug, a
foreign writer): it is reported as :class:`~ledgerflow.errors.StorageCorruptError` naming the
row, instead of being acted on.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from ledgerflow.errors import IllegalTransitionError, StorageCorruptError
from ledgerflow.ledger.records import Delivery, EffectRecord, InstanceRecord, StepRecord
from ledgerflow.model.effect import EffectState
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.step import StepStatus

Row = Mapping[str, Any]
R = TypeVar("R")
Convert = Callable[[Any], Any]


def _as_given(value: Any) -> Any:
    return value


def _flag(value: Any) -> bool:
    # Both schemas keep a flag as an integer, 0 or 1.
    return bool(value != 0)


def _converter(annotation: Any) -> Convert:
    """How a column's value becomes the value of a field of this declared type: integers,
    reals, enums and flags are converted (a value that is none of them makes the row corrupt);
    texts are taken as the driver reads them."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional, (annotation,) = True, members
    while hasattr(annotation, "__supertype__"):  # an identity type (NewType) of the model
        annotation = annotation.__supertype__
    convert: Convert = _as_given
    if annotation is bool:
        convert = _flag
    elif annotation in (int, float) or (
        isinstance(annotation, type) and issubclass(annotation, enum.Enum)
    ):
        convert = annotation
    if not optional:
        return convert
    return lambda value: None if value is None else convert(value)


# Per record type, each field's name and converter: worked out once, on the first read.
_PLANS: dict[type[Any], tuple[tuple[str, Convert], ...]] = {}


def _plan(kind: type[Any]) -> tuple[tuple[str, Convert], ...]:
    plan = _PLANS.get(kind)
    if plan is None:
        hints = typing.get_type_hints(kind)
        plan = tuple((f.name, _converter(hints[f.name])) for f in dataclasses.fields(kind))
        _PLANS[kind] = plan
    return plan


def record_from_row(kind: type[R], row: Row) -> R:
    """A record (a frozen dataclass) from the row's columns of its fields' names, each value
    converted to the field's declared type. A missing column or a value of the wrong kind
    raises (KeyError, ValueError, TypeError): the row was not written by these rules."""
    build = cast(Callable[..., R], kind)
    plan = _plan(cast(type[Any], kind))
    return build(**{name: convert(row[name]) for name, convert in plan})


def fields(record: Any) -> dict[str, Any]:
    """A record as query parameters: enums by their value, everything else as it is."""
    out: dict[str, Any] = {}
    for name in record.__dataclass_fields__:
        value = getattr(record, name)
        out[name] = value.value if isinstance(value, enum.Enum) else value
    return out


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
    build = functools.partial(record_from_row, InstanceRecord)
    return _checked("lf_instances", r, "instance_id", build, instance_invariant)


def step_from_row(r: Row) -> StepRecord:
    build = functools.partial(record_from_row, StepRecord)
    return _checked("lf_steps", r, "command_id", build, step_invariant)


def effect_from_row(r: Row) -> EffectRecord:
    build = functools.partial(record_from_row, EffectRecord)
    return _checked("lf_effects", r, "effect_id", build, effect_invariant)


def refuse_broken(broken: str | None, kind: str, ident: str) -> None:
    """The same invariants, asserted before a write: a row every read would refuse is never
    written."""
    if broken is not None:
        raise IllegalTransitionError(f"refused write to {kind} {ident}: it would be {broken}")


def delivery_from_row(r: Row) -> Delivery:
    try:
        return record_from_row(Delivery, r)
    except (KeyError, ValueError, TypeError) as exc:
        raise StorageCorruptError(f"corrupt lf_inbox row: {exc}") from None
