"""What the console's pages show, prepared from the ledgers (internal).

The templates only lay out; this module decides what a person sees: an instance's ledgers with
the decoded payloads, the UNKNOWN effects and their age picked out, the compensation plan (the
compensations, each beside the effect it undoes), and a repair plan as a diff of the ledger
(each change as the line it removes and the line it adds).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from ledgerflow.errors import PayloadError
from ledgerflow.operators.service import AuditRecord, InstanceOverview
from ledgerflow.operators.shapes import decoded
from ledgerflow.web.request_guard import checked_json
from ledgerflow.web.timeline_chart import Chart, Entry, layout

E = TypeVar("E", bound=enum.Enum)


def when(at: float | None) -> str:
    """A ledger time, in UTC (the console's readers are anywhere)."""
    if at is None:
        return ""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float | None) -> str:
    """A duration as a person says it: ``45 s``, ``12 min``, ``3.5 h``, ``2.0 d``."""
    if seconds is None:
        return ""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def pretty(text: str | None) -> str:
    """A JSON field of the ledger, indented for reading (as stored when it is not JSON)."""
    if text is None:
        return ""
    value = decoded(text)
    return text if isinstance(value, str) and value == text else json.dumps(value, indent=1)


def distinct_cause(record: Any) -> str | None:
    """An instance's cause, when it says more than its reason: the journal often keeps the
    reason itself as the cause (``code: reason``), which the page would only repeat."""
    cause: str | None = record.cause
    if not cause or cause in (record.reason, f"{record.reason_code}: {record.reason}"):
        return None
    return cause


def form_json(text: str, what: str) -> Any:
    """A JSON field of a form (blank: not given), held to the rule of an API body (the same
    reader: nesting, NUL and lone surrogates, 64-bit integers, finite numbers)."""
    if not text.strip():
        return None
    try:
        return checked_json(text.encode("utf-8", "surrogatepass"))
    except PayloadError as exc:
        raise PayloadError(f"the {what} field, read as an API body is: {exc.message}") from None


def form_int(text: str, what: str) -> int | None:
    if not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise PayloadError(f"the {what} field must be a whole number") from None


def form_moment(text: str, what: str) -> float | None:
    """A time a form gives as ``YYYY-MM-DDTHH:MM[:SS]`` (a ``datetime-local`` field), read as
    UTC, the console's time zone (blank: not given)."""
    if not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise PayloadError(
            f"the {what} field must be a time such as 2026-12-02T06:30 (UTC)"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def form_choice(kind: type[E], text: str, what: str) -> E:
    for member in kind:
        if member.value == text:
            return member
    raise PayloadError(f"the {what} field must be one of {', '.join(m.value for m in kind)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceView:
    # The ledgers, and one page of the inbox and of the timeline.
    page: InstanceOverview
    flags: list[Any]
    audit: list[AuditRecord]
    unknown: list[Any] = field(default_factory=list)
    compensations: list[tuple[Any, Any]] = field(default_factory=list)

    @property
    def instance(self) -> Any:
        return self.page.instance


def instance_view(
    page: InstanceOverview, flags: list[Any], audit: list[AuditRecord]
) -> InstanceView:
    effects = {e.effect_id: e for e in page.effects}
    return InstanceView(
        page=page,
        flags=flags,
        audit=audit,
        unknown=[e for e in page.effects if e.state.value == "UNKNOWN"],
        compensations=[
            (c, effects.get(c.compensates)) for c in page.effects if c.compensates is not None
        ],
    )


def timeline_chart(page: InstanceOverview, entries: list[Entry], *, now: float) -> Chart:
    """The instance's visual timeline: each journal position named by its step or effect."""
    labels = {int(s.seq): s.name for s in page.steps}
    kinds = {int(s.seq): s.kind.value for s in page.steps}
    for e in page.effects:
        labels[int(e.seq)] = f"{e.participant}.{e.operation}"
        if e.compensates is not None:
            kinds[int(e.seq)] = "compensation"
    return layout(entries, labels=labels, kinds=kinds, now=now)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffLine:
    sign: str  # "-", "+" or " "
    text: str


def plan_diff(plan: Any) -> list[DiffLine]:
    """A repair plan as the lines of the ledger it removes and adds."""
    lines = [
        DiffLine(
            sign=" ", text=f"precondition: {plan.status.value} at generation {plan.generation}"
        )
    ]
    if plan.fence:
        lines += [
            DiffLine(sign="-", text=f"generation {plan.generation}"),
            DiffLine(sign="+", text=f"generation {plan.generation_after} (workers fenced out)"),
        ]
    if plan.instance is not None:
        change = plan.instance
        lines += [
            DiffLine(sign="-", text=f"instance: {change.expected.value}"),
            DiffLine(
                sign="+",
                text=f"instance: {change.status.value} ({change.reason_code}: {change.reason})",
            ),
        ]
    for effect in plan.effects:
        lines += [
            DiffLine(sign="-", text=f"effect {effect.seq}: {effect.expected.value}"),
            DiffLine(
                sign="+",
                text=f"effect {effect.seq}: {effect.state.value}, attempt {effect.attempt}"
                + (f", evidence {effect.evidence}" if effect.evidence is not None else ""),
            ),
        ]
    for step in plan.steps:
        lines += [
            DiffLine(sign="-", text=f"step {step.seq}: {step.expected.value}"),
            DiffLine(
                sign="+",
                text=f"step {step.seq}: {step.status.value}, attempt {step.attempt}"
                + (f", output {step.output}" if step.output is not None else "")
                + (", due now" if step.due_now else ""),
            ),
        ]
    if plan.cancel is not None:
        undo = "with" if plan.cancel.compensate else "without"
        lines.append(DiffLine(sign="+", text=f"cancel requested {undo} compensation"))
    lines += [DiffLine(sign=" ", text=f"note: {note}") for note in plan.notes]
    return lines
