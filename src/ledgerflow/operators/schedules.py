"""An operator's schedules: list, show, pause, resume, trigger, backfill, delete (internal).

Each change is one transaction with its audit record (the principal's name and role on it):
the schedule's write, the starts it makes, and the record, or none of them. A manual trigger
starts its instance under its own key (``schedule:NAME:trigger:ID``), never a slot's, so it
takes no slot and a repeated trigger with the same request id is the same instance. Unless
the schedule's last instance still runs, the triggered one becomes it: while it runs, the
overlap policy of the slots after it (skip, buffer, cancel_other) sees it, as it sees a
slot's. A
backfill fires the slots of a past range that no tick fired (undecided, MISSED or SKIPPED),
each by the spec in force at its nominal instant, as the slot's own instance: run twice, it
adds nothing.

Example::

    commands = operations.schedules()
    commands.trigger("nightly", request_id="ops-42", reason="rerun after the fix")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledgerflow.errors import NotAuthorizedError, ScheduleNotFoundError
from ledgerflow.ledger.records import StartInstance
from ledgerflow.ledger.schedules import (
    RecordSlots,
    RecordTrigger,
    ScheduleRecord,
    SetSchedule,
    SlotOutcome,
    SlotRecord,
)
from ledgerflow.ledger.transaction import AppendAudit, Started, Transaction
from ledgerflow.model.authority import ApiRole
from ledgerflow.model.schedule import ScheduleSpec, iso_utc, slot_key, slots_between, trigger_key
from ledgerflow.operators import actions
from ledgerflow.operators.commands import Caller, Operation
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.schedules import start_of
from ledgerflow.runtime.sync_engine import SyncEngine
from ledgerflow.storage.store import Store

__all__ = ["Backfill", "ScheduleCommands", "ScheduleView", "iso_utc", "schedule_json", "slot_json"]

# The audit kinds of schedule changes (listed among the actions' kinds).
SCHEDULE_PAUSE = actions.SCHEDULE_PAUSE
SCHEDULE_RESUME = actions.SCHEDULE_RESUME
SCHEDULE_DELETE = actions.SCHEDULE_DELETE
SCHEDULE_TRIGGER = actions.SCHEDULE_TRIGGER
SCHEDULE_BACKFILL = actions.SCHEDULE_BACKFILL
# Every change of a schedule takes the operator's role; a local actor needs no grant.
SCHEDULE_CHANGE = Operation("schedule", ApiRole.OPERATOR, None)
# Slots one backfill fires at most (a longer range is backfilled in parts).
BACKFILL_SLOTS_MAX = 1000
# Decided slots `show` lists.
SHOWN_SLOTS = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleView:
    schedule: ScheduleRecord
    slots: list[SlotRecord]


@dataclass(frozen=True, slots=True, kw_only=True)
class Backfill:
    """What a backfill did: the slots it fired, and those it left as they were decided."""

    fired: list[float]
    kept: int


class ScheduleCommands:
    """The schedule commands on one store, for one caller (see module)."""

    def __init__(self, store: Store, engine: SyncEngine, clock: Clock, caller: Caller) -> None:
        self._store = store
        self._codec = engine.codec
        self._engine = engine
        self._clock = clock
        self._caller = caller

    def every(self) -> list[ScheduleRecord]:
        """The journal's schedules (not the deleted ones), by name."""
        return [s for s in self._store.schedules() if not s.deleted and self._sees(s)]

    def _sees(self, record: ScheduleRecord) -> bool:
        try:
            self._caller.acts_in(record.tenant)
        except NotAuthorizedError:
            return False
        return True

    def show(self, name: str, *, slots: int = SHOWN_SLOTS) -> ScheduleView:
        return ScheduleView(
            schedule=self._found(name), slots=self._store.schedule_slots(name, limit=slots)
        )

    def _found(self, name: str) -> ScheduleRecord:
        record = self._store.schedule(name)
        if record is None or record.deleted or not self._sees(record):
            raise ScheduleNotFoundError(f"no schedule named {name!r}", schedule=name)
        return record

    def _audit(self, kind: str, name: str, *, role: str | None, outcome: str, reason: str,
               arguments: dict[str, object]) -> None:  # fmt: skip
        actions.record_action(
            self._store, self._clock, actor=self._caller.actor, role=role, kind=kind,
            instance_id=None, target=f"schedule:{name}", outcome=outcome, reason=reason,
            arguments=arguments,
        )  # fmt: skip

    def _authorized(self, kind: str, name: str, reason: str) -> tuple[ScheduleRecord, str | None]:
        """The schedule, and the role the change is recorded under; a refusal is recorded
        (with the caller's name and role), then raised."""
        record = self._found(name)
        try:
            return record, self._caller.authorize(SCHEDULE_CHANGE)
        except NotAuthorizedError as exc:
            actions.record_refusal(
                self._store, self._clock, actor=self._caller.actor, role=self._caller.role,
                kind=kind, instance_id=None, target=f"schedule:{name}", reason=reason,
                arguments={}, error=exc,
            )  # fmt: skip
            raise

    def _set(self, kind: str, name: str, write: SetSchedule, reason: str) -> bool:
        _, role = self._authorized(kind, name, reason)
        with self._store.transaction():
            (changed,) = self._store.apply(Transaction(writes=(write,)), now=self._clock.now())
            self._audit(
                kind, name, role=role, outcome="applied" if changed else "no-op",
                reason=reason, arguments={},
            )  # fmt: skip
        return bool(changed)

    def pause(self, name: str, *, reason: str = "") -> bool:
        """Pause: the slots that come due while paused are recorded SKIPPED ("paused")."""
        return self._set(SCHEDULE_PAUSE, name, SetSchedule(name=name, paused=True), reason)

    def resume(self, name: str, *, reason: str = "") -> bool:
        return self._set(SCHEDULE_RESUME, name, SetSchedule(name=name, paused=False), reason)

    def delete(self, name: str, *, reason: str = "") -> bool:
        """Delete: no more slots; its row and its slots stay on the record."""
        return self._set(SCHEDULE_DELETE, name, SetSchedule(name=name, deleted=True), reason)

    def trigger(self, name: str, *, request_id: str, reason: str = "") -> Started:
        """Start the schedule's workflow now under the trigger's own key (see module)."""
        record, role = self._authorized(SCHEDULE_TRIGGER, name, reason)
        spec = record.parsed
        new = start_of(
            self._engine.registry, self._codec.encode, spec,
            key=trigger_key(name, request_id),
        )  # fmt: skip
        with self._store.transaction():
            # The trigger's row, with its start: the overlap policy of the slots after it
            # sees the triggered run while it runs, as it sees the last slot's.
            noted = RecordTrigger(name=name, instance_id=new.instance_id)
            started, _ = self._store.apply(
                Transaction(writes=(StartInstance(new=new), noted)), now=self._clock.now()
            )
            assert isinstance(started, Started)
            self._audit(
                SCHEDULE_TRIGGER, name, role=role,
                outcome="applied" if started.new else "no-op", reason=reason,
                arguments={"request_id": request_id, "instance_id": new.instance_id},
            )  # fmt: skip
        return started

    def backfill(self, name: str, *, start: float, end: float, reason: str = "") -> Backfill:
        """Fire the slots in (start, end] no tick fired, each by the spec in force then."""
        record, role = self._authorized(SCHEDULE_BACKFILL, name, reason)
        end = min(end, record.cursor - 1e-6)  # the cursor's slots are the ticks'
        decided = {s.nominal_at: s for s in self._store.schedule_slots(name, limit=2**31 - 1)}
        now = self._clock.now()
        fired: list[float] = []
        writes: list[StartInstance | RecordSlots | AppendAudit] = []
        slots: list[SlotRecord] = []
        kept = 0
        for version, spec, nominal in self._slots_in_force(name, start, end):
            old = decided.get(nominal)
            if old is not None and old.outcome in (SlotOutcome.FIRED, SlotOutcome.BUFFERED):
                kept += 1
                continue
            if old is not None:
                kept += 1  # decided as not fired: left as it was, its record stands
                continue
            new = start_of(
                self._engine.registry, self._codec.encode, spec,
                key=slot_key(name, nominal),
            )  # fmt: skip
            writes.append(StartInstance(new=new))
            slots.append(
                SlotRecord(
                    name=name, spec_version=version, nominal_at=nominal,
                    outcome=SlotOutcome.FIRED, reason="backfill", instance_id=new.instance_id,
                    decided_at=now, lateness=max(0.0, now - nominal),
                )
            )  # fmt: skip
            fired.append(nominal)
        with self._store.transaction():
            if slots:
                self._store.apply(Transaction(writes=(*writes, RecordSlots(slots=tuple(slots)))),
                                  now=now)  # fmt: skip
            self._audit(
                SCHEDULE_BACKFILL, name, role=role,
                outcome="applied" if fired else "no-op", reason=reason,
                arguments={"from": iso_utc(start), "to": iso_utc(end), "fired": len(fired)},
            )  # fmt: skip
        return Backfill(fired=fired, kept=kept)

    def _slots_in_force(
        self, name: str, start: float, end: float
    ) -> list[tuple[int, ScheduleSpec, float]]:
        """Each slot in (start, end] of the spec in force at it (a spec is in force from
        when it was declared until the next was; the first one also before it)."""
        specs = self._store.schedule_specs(name)
        found: list[tuple[int, ScheduleSpec, float]] = []
        for i, (version, text, since) in enumerate(specs):
            spec = ScheduleSpec.from_json(text)
            until = specs[i + 1][2] if i + 1 < len(specs) else end
            low = start if i == 0 else max(start, since)
            high = min(end, until)
            if high <= low:
                continue
            limit = BACKFILL_SLOTS_MAX - len(found)
            found.extend((version, spec, n) for n in slots_between(spec, after=low, until=high,
                                                                  limit=limit))  # fmt: skip
        return found


def schedule_json(record: ScheduleRecord) -> dict[str, Any]:
    spec = record.parsed
    return {
        "name": record.name,
        "tenant": record.tenant,
        "workflow": spec.workflow,
        "cron": spec.cron,
        "every_seconds": spec.every_seconds,
        "tz": spec.tz,
        "overlap": spec.overlap.value,
        "catch_up": spec.catch_up.value,
        "spec_version": record.spec_version,
        "next_slot": iso_utc(record.cursor),
        "paused": record.paused,
        "buffered": None if record.buffered_at is None else iso_utc(record.buffered_at),
        "last_instance_id": record.last_instance_id,
    }


def slot_json(slot: SlotRecord) -> dict[str, Any]:
    return {
        "nominal_at": iso_utc(slot.nominal_at),
        "spec_version": slot.spec_version,
        "outcome": slot.outcome.value,
        "reason": slot.reason,
        "instance_id": slot.instance_id,
        "lateness_seconds": round(slot.lateness, 3),
    }
