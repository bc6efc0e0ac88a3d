"""Schedules on the ledger: their rows, the writes that move them, and the decision of a tick
(internal).

A schedule's row keeps its spec (and the version of it in force), its *cursor* (the next
nominal slot not decided yet), whether it is paused, the slot it holds buffered and the
instance it fired last. A tick of a schedule is one :class:`AdvanceSchedule` write, in the
same transaction as the :class:`~ledgerflow.ledger.records.StartInstance` writes of the slots
it fires: it is conditional on the cursor (and the buffered slot) being what the tick was
planned against, so two workers planning the same tick cannot both apply it; the loser's
whole transaction rolls back, its starts with it. Every slot the cursor passes gets one row:
FIRED (with its instance), or SKIPPED, MISSED or BUFFERED with its reason.

:func:`plan_tick` is the decision, pure: the spec, the row, the time and whether the last
instance still runs in, the slots' outcomes and the new cursor out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from ledgerflow.model.schedule import (
    LATE_AFTER_SECONDS,
    CatchUp,
    Overlap,
    ScheduleSpec,
    due_at,
    next_slot,
)

# Slots one tick decides at most; a longer backlog is decided over the following ticks (the
# latest late slot is fired by the tick that reaches it).
SLOTS_PER_TICK_MAX = 500


class SlotOutcome(enum.Enum):
    FIRED = "FIRED"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"
    BUFFERED = "BUFFERED"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A schedule's row."""

    name: str
    tenant: str
    spec: str
    spec_version: int
    cursor: float
    paused: bool
    buffered_at: float | None
    buffered_version: int | None
    last_instance_id: str | None
    deleted: bool
    updated_at: float

    @property
    def parsed(self) -> ScheduleSpec:
        return ScheduleSpec.from_json(self.spec)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotRecord:
    """One decided slot: its identity (schedule, spec version, nominal instant), its outcome
    and why, and the instance it fired."""

    name: str
    spec_version: int
    nominal_at: float
    outcome: SlotOutcome
    reason: str
    instance_id: str | None
    decided_at: float
    lateness: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclareSchedule:
    """Keep a spec as the schedule's: a new schedule starts at ``cursor``; a changed spec is
    the next spec version, in force from ``now`` on (the cursor moves to ``cursor``); the same
    spec changes nothing. A deleted schedule stays deleted. Answer: the spec version in
    force."""

    name: str
    tenant: str
    spec: str
    cursor: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvanceSchedule:
    """One tick of a schedule (see module): conditional on ``expected_cursor`` and
    ``expected_buffered_at``; records ``slots``, moves the cursor and the buffered slot.
    Answer: how many slot rows it wrote."""

    name: str
    expected_cursor: float
    expected_buffered_at: float | None
    cursor: float
    buffered_at: float | None
    buffered_version: int | None
    last_instance_id: str | None
    slots: tuple[SlotRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSlots:
    """Slots decided outside the schedule's cursor (a backfill): each kept unless its slot
    has a row already. Answer: how many were new."""

    slots: tuple[SlotRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SetSchedule:
    """An operator's change of a schedule: pause, resume (the cursor moves to ``cursor``: the
    slots of the pause are recorded SKIPPED by the ticks that pass them, so they are none of
    them fired late), or delete. Answer: whether the schedule changed (False: it was so
    already)."""

    name: str
    paused: bool | None = None
    deleted: bool | None = None


ScheduleWrite = DeclareSchedule | AdvanceSchedule | RecordSlots | SetSchedule


@dataclass(frozen=True, slots=True, kw_only=True)
class Firing:
    """A slot a tick fires (its row is among the tick's slots)."""

    spec_version: int
    nominal_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TickPlan:
    """What a tick does: the write, and the slots it fires (the caller adds their starts)."""

    advance: AdvanceSchedule
    firings: tuple[Firing, ...]


def plan_tick(
    record: ScheduleRecord,
    *,
    now: float,
    last_running: bool,
    instance_for: Callable[[float], str],
) -> TickPlan | None:
    """Decide every slot of ``record`` due by ``now`` (at most :data:`SLOTS_PER_TICK_MAX`),
    or None when nothing is due. ``instance_for`` names the instance a slot's nominal instant
    would start (the caller derives it from the slot's business key)."""
    spec = record.parsed
    version = record.spec_version
    due: list[float] = []
    cursor = record.cursor
    while len(due) < SLOTS_PER_TICK_MAX and due_at(spec, cursor) <= now:
        due.append(cursor)
        cursor = next_slot(spec, after=cursor)
    buffered_fires = record.buffered_at is not None and not last_running and not record.paused
    if not due and not buffered_fires:
        return None

    slots: list[SlotRecord] = []
    firings: list[Firing] = []
    running = last_running
    last = record.last_instance_id
    buffered_at, buffered_version = record.buffered_at, record.buffered_version

    def row(nominal: float, outcome: SlotOutcome, reason: str, *, spec_version: int) -> None:
        instance = instance_for(nominal) if outcome is SlotOutcome.FIRED else None
        slots.append(
            SlotRecord(
                name=record.name,
                spec_version=spec_version,
                nominal_at=nominal,
                outcome=outcome,
                reason=reason,
                instance_id=instance,
                decided_at=now,
                lateness=max(0.0, now - due_at(spec, nominal)),
            )
        )

    if buffered_fires and buffered_at is not None and buffered_version is not None:
        row(
            buffered_at,
            SlotOutcome.FIRED,
            "buffered: the overlap ended",
            spec_version=buffered_version,
        )
        firings.append(Firing(spec_version=buffered_version, nominal_at=buffered_at))
        last, running = instance_for(buffered_at), True
        buffered_at = buffered_version = None

    late = [n for n in due if now - due_at(spec, n) > LATE_AFTER_SECONDS]
    newest_late = late[-1] if late else None
    # The newest late slot is the "latest" to catch up only when no slot after it is on time
    # and it is the last this tick sees (a longer backlog: a later tick reaches the latest).
    catching_up_one = newest_late is not None and newest_late == due[-1] and cursor > now
    for nominal in due:
        if record.paused:
            row(nominal, SlotOutcome.SKIPPED, "paused", spec_version=version)
            continue
        if nominal in late:
            if spec.catch_up is CatchUp.SKIP:
                row(nominal, SlotOutcome.MISSED, "late: catch_up=skip", spec_version=version)
                continue
            if spec.catch_up is CatchUp.LATEST and not (catching_up_one and nominal == newest_late):
                row(nominal, SlotOutcome.MISSED, "late: a later slot is due", spec_version=version)
                continue
            if (
                spec.catch_up is CatchUp.ALL
                and now - due_at(spec, nominal) > spec.catch_up_window_seconds
            ):
                row(
                    nominal,
                    SlotOutcome.MISSED,
                    "late: outside the catch-up window",
                    spec_version=version,
                )
                continue
        if running and spec.overlap is not Overlap.ALLOW_ALL:
            reason = f"overlap: {last} is still running"
            if spec.overlap is Overlap.BUFFER_ONE and buffered_at is None:
                row(nominal, SlotOutcome.BUFFERED, reason, spec_version=version)
                buffered_at, buffered_version = nominal, version
            else:
                extra = (
                    "; one slot is buffered already" if spec.overlap is Overlap.BUFFER_ONE else ""
                )
                row(nominal, SlotOutcome.SKIPPED, reason + extra, spec_version=version)
            continue
        row(nominal, SlotOutcome.FIRED, "due", spec_version=version)
        firings.append(Firing(spec_version=version, nominal_at=nominal))
        last, running = instance_for(nominal), True

    return TickPlan(
        advance=AdvanceSchedule(
            name=record.name,
            expected_cursor=record.cursor,
            expected_buffered_at=record.buffered_at,
            cursor=cursor,
            buffered_at=buffered_at,
            buffered_version=buffered_version,
            last_instance_id=last,
            slots=tuple(slots),
        ),
        firings=tuple(firings),
    )
