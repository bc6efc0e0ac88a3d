"""The schedules part of the storage seam (internal; :mod:`ledgerflow.storage.store` joins it
into the parts it names).

What anyone may read of the schedules (:class:`ScheduleReads`), and what a worker's tick needs
besides (:class:`ScheduleTicks`): a write transaction its calls join, and the claim of a batch
of schedules inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from ledgerflow.ledger.schedules import ScheduleRecord, SlotRecord


class ScheduleReads(Protocol):
    def schedules(self) -> list[ScheduleRecord]:
        """Every schedule the journal holds (deleted ones too), by name."""
        ...

    def schedule(self, name: str) -> ScheduleRecord | None: ...

    def schedule_slots(self, name: str, *, limit: int) -> list[SlotRecord]:
        """The latest ``limit`` decided slots of a schedule, newest first."""
        ...

    def buffered_slots(self, name: str) -> list[tuple[float, int]]:
        """The slots the schedule holds BUFFERED: (nominal instant, spec version), oldest
        first."""
        ...

    def buffered_slots_of(self, names: Sequence[str]) -> dict[str, list[tuple[float, int]]]:
        """:meth:`buffered_slots` of many schedules in one read (one holding none is absent)."""
        ...

    def schedule_specs(self, name: str) -> list[tuple[int, str, float]]:
        """Every spec the schedule has had: (version, spec, in force from), oldest first."""
        ...

    def database_now(self) -> float:
        """The database's clock, seconds since the epoch: what a schedule's tick decides by."""
        ...


class ScheduleTicks(ScheduleReads, Protocol):
    def transaction(self) -> AbstractContextManager[None]:
        """A write transaction every call on this store made inside it, on this thread, joins
        (see :class:`~ledgerflow.storage.store.OperatorStore`)."""
        ...

    def claim_schedules(self, names: Sequence[str]) -> list[ScheduleRecord]:
        """Inside :meth:`transaction`: these schedules (deleted ones left out) as they are
        now, each held by the transaction until it ends, so no other worker's tick decides
        their slots meanwhile. On PostgreSQL a schedule another transaction holds is left
        out (``FOR UPDATE SKIP LOCKED``): racing workers split a pass's schedules."""
        ...
