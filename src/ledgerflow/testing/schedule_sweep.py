"""Schedules under the explorer: each worker life ticks the scenario's schedules first, and time
moves to the next slot as it moves to the next timer, for a bounded window of slots.

A run must end, and a schedule never does: the slots decided are those whose nominal instant
is within ``horizon`` seconds of the run's start (:attr:`Scenario.schedule_horizon`); once the
cursor has passed it the harness pauses the schedule, so the run quiesces once the fired
instances ended. The simulated workers do not tick on their own (their periodic tasks keep
wall-clock time): the harness ticks once at each life's start, so a run replays the same
way. A tick's own fault points (``schedule.after_claim``, ``schedule.after_advance``,
``schedule.before_fire``, ``schedule.after_fire``) are hits
like the workers': a crash there is the life's. After the run,
:func:`~ledgerflow.testing.schedule_checks.one_firing_per_slot` reads the journal's rows: one
instance or one recorded non-firing per slot.
"""

from __future__ import annotations

from ledgerflow.ledger.schedules import SetSchedule
from ledgerflow.ledger.transaction import Transaction
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.model.schedule import due_at
from ledgerflow.runtime.engine import Engine
from ledgerflow.storage.store import Store


class ScheduleDriver:
    """The schedules' side of one simulated run (nothing when the registry declares none)."""

    def __init__(self, *, declared: bool, started_at: float, horizon: float) -> None:
        self.declared = declared
        self.until = started_at + horizon
        self.ticks = 0

    async def tick(self, engine: Engine) -> None:
        """The tick a worker makes at its start (declaring the specs, deciding due slots),
        while a slot within the horizon is undecided or one is buffered: a life that starts
        late (after a crash, say) decides the late slots by the catch-up policy, as a real
        worker would."""
        store, now = engine.store, engine.clock.now()
        if self.declared and (not store.schedules() or self.next_due(store, None, now=now)):
            self.ticks += 1
            await engine.tick_schedules()

    def next_due(self, store: Store, due: float | None, *, now: float) -> float | None:
        """The earlier of ``due`` (the instances') and the next slot within the horizon (a
        buffered slot is due now once the instance it waits for has ended)."""
        if not self.declared:
            return due
        slots = [*([due] if due is not None else [])]
        for s in store.schedules():
            if s.deleted or s.paused:
                continue
            if s.cursor <= self.until:
                slots.append(due_at(s.parsed, s.cursor))
            if s.buffered_at is not None and _ended(store, s.last_instance_id):
                slots.append(now)
        return min(slots, default=None)

    def close_past_horizon(self, store: Store, *, now: float) -> None:
        """Pause each schedule whose cursor has passed the horizon, once the slot it holds
        buffered (if any) is not the horizon's own: it fires nothing more (a later slot held
        buffered stays BUFFERED, a recorded non-firing), so the run can end."""
        for s in store.schedules() if self.declared else ():
            held = s.buffered_at is not None and s.buffered_at <= self.until
            if not s.paused and s.cursor > self.until and not held:
                close = Transaction(writes=(SetSchedule(name=s.name, paused=True),))
                store.apply(close, now=now)


def _ended(store: Store, instance_id: str | None) -> bool:
    found = store.get_instance(InstanceId(instance_id)) if instance_id else None
    return found is None or found.status in FINAL_STATUSES
