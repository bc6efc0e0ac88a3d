"""Schedules run by every worker: keep the declared specs on the journal, decide due slots
(internal).

There is no scheduler process and no leader. Each worker runs :meth:`Scheduler.tick` as one
of its periodic tasks: it keeps the journal's copy of each spec its registry declares, then,
for every schedule whose workflow it can run and whose next slot is due, plans the tick
(:func:`~ledgerflow.ledger.schedules.plan_tick`) and applies it as one transaction: the
schedule's conditional advance, a row per slot, and a start per fired slot. Two workers that
plan the same tick race on the cursor; the loser's transaction rolls back whole
(:class:`~ledgerflow.errors.SlotTakenError`), so a slot is decided once, and a worker killed
before its commit leaves the slot to the next tick of any worker.

Time is the database's when the clock is the real one (PostgreSQL's ``clock_timestamp()``), so
workers whose clocks disagree decide the same slots due; a clock a test drives decides for
itself, as for leases.

Example (what :meth:`~ledgerflow.runtime.engine.Engine.worker` adds)::

    worker.periodic.add(schedules_task(Scheduler(runtime=runtime, registry=registry,
                                                 journal=store)))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ledgerflow.errors import LedgerflowError, SlotTakenError
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.records import NewInstance, StartInstance
from ledgerflow.ledger.schedules import (
    DeclareSchedule,
    ScheduleRecord,
    SlotOutcome,
    plan_tick,
)
from ledgerflow.ledger.transaction import Audited, RequestCancel, Transaction
from ledgerflow.model import names
from ledgerflow.model.definition import Registry
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.model.schedule import (
    LATE_AFTER_SECONDS,
    Overlap,
    ScheduleSpec,
    due_at,
    next_slot,
    slot_key,
)
from ledgerflow.runtime import faults
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.periodic import PeriodicTask
from ledgerflow.runtime.seams import Runtime
from ledgerflow.storage.store import JournalStore

log = logging.getLogger("ledgerflow.schedules")

# How often a worker looks for due slots: the lateness a slot may have beyond its jitter.
SCHEDULE_TICK_SECONDS = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TickReport:
    """What one worker's tick did: slots it decided, instances it started, ticks it lost."""

    decided: int = 0
    fired: int = 0
    lost: int = 0


def start_of(registry: Registry, codec_encode: Callable[[object], str], spec: ScheduleSpec, *,
             key: str) -> NewInstance:  # fmt: skip
    """The start a slot (or a trigger) of ``spec`` writes: the newest version of its workflow
    this registry holds, under the business key given."""
    definition = registry.get(spec.workflow)
    tenant, business_key = names.tenant(spec.tenant), names.business_key(key)
    return NewInstance(
        instance_id=instance_id_for(tenant, definition.name, business_key),
        tenant=tenant,
        workflow_name=definition.name,
        workflow_version=definition.version,
        fingerprint=definition.fingerprint,
        business_key=business_key,
        input=codec_encode(spec.input),
    )


class Scheduler:
    """One worker's part in running the journal's schedules (see module)."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        registry: Registry,
        journal: JournalStore,
        on_fired: Callable[[], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.registry = registry
        self.journal = journal
        # Told when a tick started instances, so this process's workers claim them now.
        self.on_fired = on_fired
        self._declared: dict[str, str] = {}

    async def now(self) -> float:
        clock = self.runtime.clock
        if not clock.real_time:
            return clock.now()
        return await self.runtime.store.call(self.journal.database_now)

    async def tick(self) -> TickReport:
        """Declare what changed, then decide every due slot this worker can fire."""
        store = self.runtime.store
        now = await self.now()
        rows = {r.name: r for r in await store.call(self.journal.schedules)}
        for spec in self.registry.schedules.values():
            text = spec.to_json()
            row = rows.get(spec.name)
            if self._declared.get(spec.name) == text or (row is not None and row.spec == text):
                self._declared[spec.name] = text
                continue
            write = DeclareSchedule(
                name=spec.name,
                tenant=names.tenant(spec.tenant),
                spec=text,
                cursor=next_slot(spec, after=now),
            )
            await store.call(self.journal.apply, Transaction(writes=(write,)), now=now)
            self._declared[spec.name] = text
            fresh = await store.call(self.journal.schedule, spec.name)
            if fresh is not None:
                rows[spec.name] = fresh
        report = TickReport()
        for row in rows.values():
            if row.deleted or not self._serves(row):
                continue
            report = _add(report, await self._decide(row, now))
        return report

    def _serves(self, row: ScheduleRecord) -> bool:
        try:
            self.registry.get(row.parsed.workflow)
        except LedgerflowError:
            return False
        return True

    async def _decide(self, row: ScheduleRecord, now: float) -> TickReport:
        spec = row.parsed
        if due_at(spec, row.cursor) > now and row.buffered_at is None:
            return TickReport()
        last_running = False
        if row.last_instance_id is not None and spec.overlap is not Overlap.ALLOW_ALL:
            last = await self.runtime.store.call(
                self.journal.get_instance, InstanceId(row.last_instance_id)
            )
            last_running = last is not None and last.status not in FINAL_STATUSES
        encode = self.runtime.codec.encode

        def start(nominal: float) -> NewInstance:
            return start_of(self.registry, encode, spec, key=slot_key(spec.name, nominal))

        buffered = []
        if row.buffered_at is not None:
            buffered = await self.runtime.store.call(self.journal.buffered_slots, row.name)
        plan = plan_tick(
            row,
            now=now,
            last_running=last_running,
            instance_for=lambda n: start(n).instance_id,
            buffered=buffered,
        )
        if plan is None:
            return TickReport()
        starts = tuple(StartInstance(new=start(f.nominal_at)) for f in plan.firings)
        cancels = () if plan.cancel is None else (_cancel_other(spec.name, plan.cancel),)
        transaction = Transaction(writes=(plan.advance, *starts, *cancels))
        if faults.plan is not None:
            faults.point("schedule.before_fire", schedule=spec.name, slots=len(plan.advance.slots))
        try:
            await self.runtime.store.call(self.journal.apply, transaction, now=now)
        except SlotTakenError:
            if self.runtime.metrics is not None:
                self.runtime.metrics.tick_lost(spec.name)
            return TickReport(lost=1)
        if faults.plan is not None:
            faults.point("schedule.after_fire", schedule=spec.name, slots=len(plan.advance.slots))
        metrics = self.runtime.metrics
        if metrics is not None:
            for slot in plan.advance.slots:
                metrics.slot_decided(
                    spec.name,
                    slot.outcome.value,
                    slot.lateness,
                    late=slot.lateness > LATE_AFTER_SECONDS,
                )
        if starts and self.on_fired is not None:
            self.on_fired()
        fired = sum(1 for s in plan.advance.slots if s.outcome is SlotOutcome.FIRED)
        return TickReport(decided=len(plan.advance.slots), fired=fired)


def _cancel_other(schedule: str, instance_id: str) -> Audited:
    """The cancel request of an overlapping slot (cancel_other), audited under the schedule's
    name in the tick's transaction (``applied``, or ``no-op`` when a request stood already)."""
    reason = f"schedule {schedule}: a newer slot is due (overlap cancel_other)"
    request = RequestCancel(instance_id=InstanceId(instance_id), reason=reason)
    entry = AuditEntry(
        actor=f"ledgerflow:schedule:{schedule}",
        role=None,
        kind="cancel",  # the operators' kind of a cancel request (operators.actions.CANCEL)
        instance_id=request.instance_id,
        target=None,
        fingerprint=f"schedule-cancel:{schedule}:{instance_id}",
        outcome="applied",  # the store's answer decides it (ledger.transaction.audited_entry)
        reason=reason,
        evidence=None,
        plan=json.dumps({"compensate": True}),
    )
    return Audited(change=request, entry=entry)


def _add(a: TickReport, b: TickReport) -> TickReport:
    return TickReport(decided=a.decided + b.decided, fired=a.fired + b.fired, lost=a.lost + b.lost)


def schedules_task(
    scheduler: Scheduler, *, interval_seconds: float = SCHEDULE_TICK_SECONDS
) -> PeriodicTask:
    """The worker's periodic tick of the journal's schedules (run at the worker's start too)."""

    async def run() -> None:
        await scheduler.tick()

    return PeriodicTask(name="schedules", interval_seconds=interval_seconds, run=run, at_start=True)
