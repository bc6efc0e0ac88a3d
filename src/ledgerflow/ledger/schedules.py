"""Schedules on the ledger: their rows, the writes that move them, and the decision of a tick
(internal).

A schedule's row keeps its spec (and the version of it in force), its *cursor* (the next
nominal slot not decided yet), whether it is paused, the slot it holds buffered and the
instance it started last (by a slot, or by a manual trigger while none ran). A tick of a
schedule is one :class:`AdvanceSchedule` write, in the same transaction as the
:class:`~ledgerflow.ledger.records.StartInstance` writes of the slots it fires: it is
conditional on the cursor (and the buffered slot) being what the tick was planned against, so
two workers planning the same tick cannot both apply it; the loser's whole transaction rolls
back, its starts with it. Every slot the cursor passes gets one row: FIRED (with its instance),
or SKIPPED, MISSED or BUFFERED with its reason.

:func:`plan_tick` is the decision, pure: the spec, the row, the time and whether the last
instance still runs in, the slots' outcomes and the new cursor out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledgerflow.model.schedule import (
    BUFFERED_SLOTS_MAX,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordTrigger:
    """A manual trigger's instance becomes the schedule's last instance, which the overlap
    policy of the slots after it sees while it runs, unless the last instance has not ended
    (a trigger never hides a running slot's instance). Answer: whether it became the last."""

    name: str
    instance_id: str


ScheduleWrite = DeclareSchedule | AdvanceSchedule | RecordSlots | SetSchedule | RecordTrigger


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
    # The running instance an overlapping slot asks to cancel (overlap cancel_other).
    cancel: str | None = None


def plan_tick(
    record: ScheduleRecord,
    *,
    now: float,
    running: str | None,
    instance_for: Callable[[float], str],
    buffered: Sequence[tuple[float, int]] = (),
) -> TickPlan | None:
    """Decide every slot of ``record`` due by ``now`` (at most :data:`SLOTS_PER_TICK_MAX`),
    or None when nothing is due. ``running`` is the schedule's last instance (its last
    slot's, or a manual trigger's) when it has not ended: the run the overlap policy sees
    (None: none runs). ``instance_for`` names the instance a slot's
    nominal instant would start (the caller derives it from the slot's business key);
    ``buffered`` is the slots BUFFERED now, (nominal instant, spec version) oldest first:
    the row holds the oldest."""
    spec = record.parsed
    due: list[float] = []
    cursor = record.cursor
    while len(due) < SLOTS_PER_TICK_MAX and due_at(spec, cursor) <= now:
        due.append(cursor)
        cursor = next_slot(spec, after=cursor)
    buffered_fires = record.buffered_at is not None and running is None and not record.paused
    if not due and not buffered_fires:
        return None
    tick = _Tick(record, spec, now, running, instance_for, buffered)
    if buffered_fires:
        tick.fire_buffered()
    late = [n for n in due if now - due_at(spec, n) > LATE_AFTER_SECONDS]
    # The newest late slot is the "latest" to catch up only when no slot after it is on time
    # and it is the last this tick sees (a longer backlog: a later tick reaches the latest).
    latest = late[-1] if late and late[-1] == due[-1] and cursor > now else None
    for nominal in due:
        if record.paused:
            tick.row(nominal, SlotOutcome.SKIPPED, "paused")
        elif nominal in late and (missed := tick.missed(nominal, latest)) is not None:
            tick.row(nominal, SlotOutcome.MISSED, missed)
        else:
            tick.decide(nominal)
    return TickPlan(
        advance=AdvanceSchedule(
            name=record.name,
            expected_cursor=record.cursor,
            expected_buffered_at=record.buffered_at,
            cursor=cursor,
            buffered_at=tick.queue[0][0] if tick.queue else None,
            buffered_version=tick.queue[0][1] if tick.queue else None,
            last_instance_id=tick.last,
            slots=tuple(tick.slots),
        ),
        firings=tuple(tick.firings),
        cancel=tick.cancel,
    )


class _Tick:
    """The decisions of one tick so far: its rows, its firings, and what runs after them."""

    def __init__(
        self,
        record: ScheduleRecord,
        spec: ScheduleSpec,
        now: float,
        running: str | None,
        instance_for: Callable[[float], str],
        buffered: Sequence[tuple[float, int]],
    ) -> None:
        self.record, self.spec, self.now = record, spec, now
        # The instance the overlap policy sees running (a slot this tick fires becomes it).
        self.running, self.instance_for = running, instance_for
        self.last = record.last_instance_id
        # The buffered slots, oldest first (the row names the oldest, if the read is older).
        self.queue = list(buffered)
        if record.buffered_at is not None and not self.queue:
            assert record.buffered_version is not None
            self.queue = [(record.buffered_at, record.buffered_version)]
        self.slots: list[SlotRecord] = []
        self.firings: list[Firing] = []
        self.cancel: str | None = None

    def row(
        self, nominal: float, outcome: SlotOutcome, reason: str, *, version: int | None = None
    ) -> None:
        spec_version = self.record.spec_version if version is None else version
        fired = outcome is SlotOutcome.FIRED
        self.slots.append(
            SlotRecord(
                name=self.record.name,
                spec_version=spec_version,
                nominal_at=nominal,
                outcome=outcome,
                reason=reason,
                instance_id=self.instance_for(nominal) if fired else None,
                decided_at=self.now,
                lateness=max(0.0, self.now - due_at(self.spec, nominal)),
            )
        )
        if fired:
            self.firings.append(Firing(spec_version=spec_version, nominal_at=nominal))
            self.last = self.running = self.instance_for(nominal)

    def fire_buffered(self) -> None:
        """The oldest buffered slot fires first, under the spec version it was buffered
        under."""
        nominal, version = self.queue.pop(0)
        self.row(nominal, SlotOutcome.FIRED, "buffered: the overlap ended", version=version)

    def missed(self, nominal: float, latest: float | None) -> str | None:
        """Why a late slot is MISSED under the catch-up policy (None: it may fire)."""
        catch_up = self.spec.catch_up
        if catch_up is CatchUp.SKIP:
            return "late: catch_up=skip"
        if catch_up is CatchUp.LATEST and nominal != latest:
            return "late: a later slot is due"
        window = self.spec.catch_up_window_seconds
        if catch_up is CatchUp.ALL and self.now - due_at(self.spec, nominal) > window:
            return "late: outside the catch-up window"
        return None

    def decide(self, nominal: float) -> None:
        """A slot that may fire: fired, or held back by the overlap policy."""
        overlap = self.spec.overlap
        if self.running is None or overlap is Overlap.ALLOW_ALL:
            self.row(nominal, SlotOutcome.FIRED, "due")
            return
        reason = f"overlap: {self.running} is still running"
        if overlap is Overlap.CANCEL_OTHER:
            # Asked again by every overlapping slot: the first request stands, the rest are
            # no-ops, so a tick that lost a race or a crashed one loses no request.
            self.cancel = self.running
            reason = f"overlap: {self.running} is asked to cancel"
        bound = {Overlap.BUFFER_ALL: BUFFERED_SLOTS_MAX, Overlap.SKIP: 0}.get(overlap, 1)
        if len(self.queue) < bound:
            self.row(nominal, SlotOutcome.BUFFERED, reason)
            self.queue.append((nominal, self.record.spec_version))
        elif overlap in (Overlap.BUFFER_ONE, Overlap.CANCEL_OTHER):
            self.row(nominal, SlotOutcome.SKIPPED, reason + "; one slot is buffered already")
        elif overlap is Overlap.BUFFER_ALL:
            self.row(nominal, SlotOutcome.SKIPPED, reason + f"; the buffer is full ({bound})")
        else:
            self.row(nominal, SlotOutcome.SKIPPED, reason)
