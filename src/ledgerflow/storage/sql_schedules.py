"""The schedules part of the SQL store: declaring a spec, a tick's conditional advance, a
backfill's slots, an operator's pause, resume and delete (internal).

Each is a write of a :class:`~ledgerflow.ledger.transaction.Transaction`, applied by the one
kernel with the transaction's other writes: a tick's advance and the starts of the slots it
fires are one transaction, so a slot is FIRED with its instance or not decided at all. The
advance is conditional on the cursor it was planned against; zero rows changed refuses the
whole transaction (:class:`~ledgerflow.errors.SlotTakenError`), and the key of the slots'
table refuses a second decision of a slot whatever path tries it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from ledgerflow.errors import SlotTakenError
from ledgerflow.ledger.schedules import (
    AdvanceSchedule,
    DeclareSchedule,
    RecordSlots,
    RecordTrigger,
    ScheduleRecord,
    ScheduleWrite,
    SlotOutcome,
    SlotRecord,
)
from ledgerflow.model.schedule import BUFFERED_SLOTS_MAX
from ledgerflow.storage.rows import Row, fields, record_from_row
from ledgerflow.storage.sql_seam import SqlSeam


def _taken(name: str) -> SlotTakenError:
    return SlotTakenError(
        f"schedule {name!r}: another worker decided these slots first", schedule=name
    )


def _one_changed(name: str, _: list[Row], changed: int) -> None:
    """The check of a conditional write of a tick: exactly one row, or the slots are taken."""
    if changed != 1:
        raise _taken(name)


class ScheduleStore(SqlSeam):
    def _schedule_write(self, write: ScheduleWrite, now: float) -> int | bool:
        if isinstance(write, DeclareSchedule):
            return self._declare_schedule(write, now)
        if isinstance(write, AdvanceSchedule):
            return self._advance_schedules([write], now)[0]
        if isinstance(write, RecordTrigger):
            self._run("lock_schedule", {"name": write.name})
            params = {"name": write.name, "instance_id": write.instance_id, "now": now}
            return self._run("note_schedule_trigger", params)[1] == 1
        if isinstance(write, RecordSlots):
            return sum(
                self._run("insert_slot_unless_decided", fields(slot))[1] for slot in write.slots
            )
        changed = 0
        if write.paused is not None:
            _, changed = self._run(
                "set_schedule_paused",
                {"name": write.name, "paused": int(write.paused), "now": now},
            )
        if write.deleted:
            _, changed = self._run("delete_schedule", {"name": write.name, "now": now})
        return changed == 1

    def _declare_schedule(self, write: DeclareSchedule, now: float) -> int:
        params = {
            "name": write.name,
            "tenant": write.tenant,
            "spec": write.spec,
            "cursor": write.cursor,
            "now": now,
        }
        self._run("insert_schedule", params)
        self._run("change_schedule_spec", params)
        self._run("keep_schedule_spec", params)
        rows, _ = self._run("select_schedule", {"name": write.name})
        return int(rows[0]["spec_version"])

    def _advance_schedules(self, writes: Sequence[AdvanceSchedule], now: float) -> list[int]:
        """Many ticks' advances in one transaction: sent as one batch (on PostgreSQL one
        round trip, not one per statement) unless a batch is open already; a refusal of any
        is the whole transaction's, found before it may commit."""
        if len(writes) > 1 and not self._in_batch:
            with self._batch(hold=False):
                return [self._advance_schedule(w, now) for w in writes]
        return [self._advance_schedule(w, now) for w in writes]

    def _advance_schedule(self, write: AdvanceSchedule, now: float) -> int:
        taken = functools.partial(_one_changed, write.name)
        params = {
            "name": write.name,
            "expected_cursor": write.expected_cursor,
            "expected_buffered_at": write.expected_buffered_at,
            "cursor": write.cursor,
            "buffered_at": write.buffered_at,
            "buffered_version": write.buffered_version,
            "last_instance_id": write.last_instance_id,
            "now": now,
        }
        self._send("advance_schedule", params, taken)
        for slot in write.slots:
            fires_buffered = (
                slot.outcome is SlotOutcome.FIRED and slot.nominal_at == write.expected_buffered_at
            )
            if fires_buffered:
                self._send("fire_buffered_slot", fields(slot), taken)
            else:
                self._send("insert_slot", fields(slot))
        return len(write.slots)

    # -- reads ---------------------------------------------------------------------------------

    def schedules(self) -> list[ScheduleRecord]:
        """Every schedule the journal holds (deleted ones too), by name."""
        with self._read():
            rows, _ = self._run("select_schedules", {})
        return [record_from_row(ScheduleRecord, r) for r in rows]

    def schedule(self, name: str) -> ScheduleRecord | None:
        with self._read():
            rows, _ = self._run("select_schedule", {"name": name})
        return record_from_row(ScheduleRecord, rows[0]) if rows else None

    def schedule_slots(self, name: str, *, limit: int) -> list[SlotRecord]:
        """The latest ``limit`` decided slots of a schedule, newest first."""
        with self._read():
            rows, _ = self._run("select_slots", {"name": name, "limit": limit})
        return [record_from_row(SlotRecord, r) for r in rows]

    def buffered_slots(self, name: str) -> list[tuple[float, int]]:
        """The slots the schedule holds BUFFERED: (nominal instant, spec version), oldest
        first."""
        with self._read():
            rows, _ = self._run(
                "select_buffered_slots", {"name": name, "limit": BUFFERED_SLOTS_MAX}
            )
        return [(float(r["nominal_at"]), int(r["spec_version"])) for r in rows]

    def claim_schedules(self, names: Sequence[str]) -> list[ScheduleRecord]:
        """Inside a write transaction: these schedules (deleted ones left out) as they are now,
        each held by this transaction until it ends; on PostgreSQL one another transaction
        holds is left out too (see the query)."""
        with self._read():  # inside the caller's transaction: it joins it
            rows, _ = self._run("claim_schedules", {"names": json.dumps(list(names))})
        return [record_from_row(ScheduleRecord, r) for r in rows]

    def buffered_slots_of(self, names: Sequence[str]) -> dict[str, list[tuple[float, int]]]:
        """:meth:`buffered_slots` of many schedules in one read (a schedule holding none is
        absent)."""
        with self._read():
            rows, _ = self._run("select_buffered_slots_of", {"names": json.dumps(list(names))})
        held: dict[str, list[tuple[float, int]]] = {}
        for r in rows:
            slots = held.setdefault(str(r["name"]), [])
            if len(slots) < BUFFERED_SLOTS_MAX:
                slots.append((float(r["nominal_at"]), int(r["spec_version"])))
        return held

    def schedule_specs(self, name: str) -> list[tuple[int, str, float]]:
        """Every spec the schedule has had: (version, spec, in force from), oldest first."""
        with self._read():
            rows, _ = self._run("select_schedule_specs", {"name": name})
        return [_spec_row(r) for r in rows]

    def database_now(self) -> float:
        """The database's clock (PostgreSQL's; SQLite's is the machine's), seconds since the
        epoch: what a tick decides by, whichever worker plans it."""
        with self._read():
            rows, _ = self._run("database_now", {})
        return float(rows[0]["now"])


def _spec_row(r: Row) -> tuple[int, str, float]:
    return int(r["spec_version"]), str(r["spec"]), float(r["in_force_from"])
