"""The oracle's check of schedules: one firing or one recorded non-firing per slot (internal:
``ledgerflow.testing.oracle`` exports it).

Read from the store's own rows after quiescence, for every schedule:

- every slot the cursor passed, of each spec version in force, has exactly one row (the key
  holds "at most"; this holds "at least": no slot silently dropped);
- a FIRED row names the one instance its slot's business key starts, and that instance is on
  the journal; an instance under a slot's key has its FIRED row (no firing off the record);
- a manual trigger's instance takes no slot;
- at most :data:`~ledgerflow.model.schedule.BUFFERED_SLOTS_MAX` slots are BUFFERED, the
  oldest the one the schedule's row holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.ledger.schedules import ScheduleRecord, SlotOutcome, SlotRecord
from ledgerflow.model.schedule import (
    BUFFERED_SLOTS_MAX,
    ScheduleSpec,
    iso_utc,
    scheduled_by,
    slot_key,
    slots_between,
)
from ledgerflow.testing.violations import Violation

# Slots of one schedule the check walks at most (a test's schedules have far fewer).
_SLOTS_MAX = 1_000_000
INVARIANT = "one-firing-or-recorded-non-firing-per-slot"


class ScheduleReads(Protocol):
    def schedules(self) -> list[ScheduleRecord]: ...
    def schedule_slots(self, name: str, *, limit: int) -> list[SlotRecord]: ...
    def schedule_specs(self, name: str) -> list[tuple[int, str, float]]: ...
    def list_instances(self, *, limit: int = 100) -> list[InstanceRecord]: ...


def one_firing_per_slot(store: ScheduleReads) -> list[Violation]:
    """Every violation of the invariant on this journal (see module); empty when it holds."""
    instances = store.list_instances(limit=_SLOTS_MAX)
    return [v for s in store.schedules() for v in _check(store, s, instances)]


def _check(
    store: ScheduleReads, schedule: ScheduleRecord, instances: list[InstanceRecord]
) -> Iterable[Violation]:
    name = schedule.name
    rows = store.schedule_slots(name, limit=_SLOTS_MAX)
    by_nominal = {r.nominal_at: r for r in rows}
    mine: dict[str, InstanceRecord] = {
        str(i.business_key): i
        for i in instances
        if (by := scheduled_by(i.business_key)) is not None and by.schedule == name
    }
    for row in rows:
        if row.nominal_at >= schedule.cursor:
            yield Violation(INVARIANT, None, f"{name}: slot {iso_utc(row.nominal_at)} is decided "
                            "but the cursor has not passed it")  # fmt: skip
        if row.outcome is SlotOutcome.FIRED:
            instance = mine.get(slot_key(name, row.nominal_at))
            if instance is None or instance.instance_id != row.instance_id:
                what = f"{name}: slot {iso_utc(row.nominal_at)} FIRED without its instance"
                yield Violation(INVARIANT, row.instance_id, what)
        elif row.instance_id is not None:
            yield Violation(INVARIANT, row.instance_id, f"{name}: slot {iso_utc(row.nominal_at)} "
                            f"is {row.outcome.value} yet names an instance")  # fmt: skip
    for key, instance in mine.items():
        by = scheduled_by(key)
        assert by is not None
        if by.nominal_at is None:
            continue  # a trigger: its own namespace, no slot
        fired = by_nominal.get(by.nominal_at.timestamp())
        if fired is None or fired.outcome is not SlotOutcome.FIRED:
            yield Violation(INVARIANT, instance.instance_id, f"{name}: an instance under slot "
                            f"key {key} with no FIRED row")  # fmt: skip
    buffered = [r for r in rows if r.outcome is SlotOutcome.BUFFERED]
    if len(buffered) > BUFFERED_SLOTS_MAX or (
        buffered and min(r.nominal_at for r in buffered) != schedule.buffered_at
    ):
        yield Violation(INVARIANT, None, f"{name}: {len(buffered)} slots BUFFERED, the schedule "
                        f"holds {schedule.buffered_at}")  # fmt: skip
    yield from _no_gap(store, schedule, by_nominal)


def _no_gap(
    store: ScheduleReads, schedule: ScheduleRecord, by_nominal: dict[float, SlotRecord]
) -> Iterable[Violation]:
    """Every slot of each spec version between its first decided slot (or its start) and
    the cursor has a row."""
    specs = store.schedule_specs(schedule.name)
    decided = sorted(by_nominal)
    if not decided:
        return
    for i, (version, text, since) in enumerate(specs):
        spec = ScheduleSpec.from_json(text)
        own = [n for n in decided if by_nominal[n].spec_version == version]
        if not own:
            continue
        until = schedule.cursor if i + 1 == len(specs) else max(own)
        after = min(own) - 1e-6
        for nominal in slots_between(spec, after=after, until=until - 1e-6, limit=_SLOTS_MAX):
            if nominal not in by_nominal:
                yield Violation(INVARIANT, None, f"{schedule.name}: slot {iso_utc(nominal)} of "
                                f"spec v{version} (since {iso_utc(since)}) has no row")  # fmt: skip
