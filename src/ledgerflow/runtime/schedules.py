"""Schedules run by every worker: keep the declared specs on the journal, decide due slots
(internal).

There is no scheduler process and no leader. Each worker runs :meth:`Scheduler.tick` as one
of its periodic tasks: it keeps the journal's copy of each spec its registry declares, then
takes the schedules whose workflow it can run and whose next slot is due, in batches of
:data:`SCHEDULES_PER_BATCH`, and decides each batch as one transaction:

1. claim the batch's rows (``schedule.after_claim``): each held until the commit and read as
   it is now; on PostgreSQL a row another worker's tick holds is skipped (``FOR UPDATE SKIP
   LOCKED``), so racing workers split a pass instead of planning the same slots, and one
   that another worker decided since the pass read it is left alone;
2. plan each (:func:`~ledgerflow.ledger.schedules.plan_tick`) from its row as claimed, with
   whether its last instance (its last slot's, or a manual trigger's) still runs, which its
   overlap policy sees, and the slots it holds buffered;
3. write every schedule's conditional advance: a row per decided slot, FIRED, SKIPPED,
   MISSED or BUFFERED with its reason, and the cursor moved (``schedule.after_advance``);
4. write a start per fired slot and the cancel request of an overlapping cancel_other slot
   (``schedule.before_fire``), then commit (``schedule.after_fire``).

A slot is decided once: the advance stays conditional on the cursor it was planned against,
and the loser of a race the claim did not prevent rolls back whole, starts with it
(:class:`~ledgerflow.errors.SlotTakenError`); a worker killed anywhere before its commit
leaves the batch to the next tick of any worker. A batch that fails otherwise is decided
again one schedule per transaction, so one failing schedule holds back no other.

Time is the database's when the clock is the real one (PostgreSQL's ``clock_timestamp()``), so
workers whose clocks disagree decide the same slots due; a clock a test drives decides for
itself, as for leases.

Example (what :meth:`~ledgerflow.runtime.engine.Engine.worker` adds)::

    worker.periodic.add(schedules_task(Scheduler(runtime=runtime, registry=registry,
                                                 journal=store)))
"""

from __future__ import annotations

import functools
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
    TickPlan,
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
# Due schedules one transaction decides: fewer commits and round trips per pass, yet short
# enough that a batch holds its rows (and SQLite's write lock) briefly.
SCHEDULES_PER_BATCH = 50
# Parsed specs a worker keeps (by their text), well above the schedules a journal holds.
PARSED_SPECS_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TickReport:
    """What one worker's tick did: slots it decided, instances it started, ticks it lost."""

    decided: int = 0
    fired: int = 0
    lost: int = 0
    # Due schedules another worker's tick held or had decided since this pass read them.
    passed: int = 0


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
        self._specs: dict[str, ScheduleSpec] = {}
        self._made: dict[tuple[str, float], NewInstance] = {}

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
        declares = []
        for spec in self.registry.schedules.values():
            text = spec.to_json()
            row = rows.get(spec.name)
            if self._declared.get(spec.name) == text or (row is not None and row.spec == text):
                self._declared[spec.name] = text
                continue
            declares.append(
                DeclareSchedule(
                    name=spec.name,
                    tenant=names.tenant(spec.tenant),
                    spec=text,
                    cursor=next_slot(spec, after=now),
                )
            )
        if declares:
            # Every change this registry declares in one transaction: a thousand new
            # schedules are one commit, not a thousand, and their first slots are not late.
            await store.call(self.journal.apply, Transaction(writes=tuple(declares)), now=now)
            self._declared.update((d.name, d.spec) for d in declares)
            rows = {r.name: r for r in await store.call(self.journal.schedules)}
        due = [r for r in rows.values() if not r.deleted and self._serves(r) and self._due(r, now)]
        report, errors = TickReport(), []
        for at in range(0, len(due), SCHEDULES_PER_BATCH):
            batch = due[at : at + SCHEDULES_PER_BATCH]
            try:
                report = _add(report, await self._decide(batch, now))
            except LedgerflowError as exc:
                if len(batch) == 1:
                    errors.append(exc)
                    continue
                # One schedule whose tick fails must not hold back the others of its batch:
                # each is decided alone, and only the failing one fails.
                for row in batch:
                    try:
                        report = _add(report, await self._decide([row], now))
                    except LedgerflowError as alone:
                        errors.append(alone)
        if errors:
            raise errors[0]
        return report

    def _spec(self, row: ScheduleRecord) -> ScheduleSpec:
        """The row's spec, parsed once per text (a pass looks at every schedule's)."""
        spec = self._specs.get(row.spec)
        if spec is None:
            if len(self._specs) >= PARSED_SPECS_MAX:
                self._specs.clear()
            spec = self._specs[row.spec] = row.parsed
        return spec

    def _due(self, row: ScheduleRecord, now: float) -> bool:
        return row.buffered_at is not None or due_at(self._spec(row), row.cursor) <= now

    def _serves(self, row: ScheduleRecord) -> bool:
        try:
            self.registry.get(self._spec(row).workflow)
        except LedgerflowError:
            return False
        return True

    async def _decide(self, batch: list[ScheduleRecord], now: float) -> TickReport:
        """One transaction for the batch's due slots (see module), then its metrics."""
        try:
            plans, passed = await self.runtime.store.call(self._apply_batch, batch, now)
        except SlotTakenError as exc:
            if self.runtime.metrics is not None:
                self.runtime.metrics.tick_lost(exc.schedule or batch[0].name)
            return TickReport(lost=1)
        if faults.plan is not None:
            slots = sum(len(p.advance.slots) for p in plans)
            faults.point("schedule.after_fire", schedule=_names(plans), slots=slots)
        metrics = self.runtime.metrics
        decided = fired = 0
        for plan in plans:
            for slot in plan.advance.slots:
                decided += 1
                fired += slot.outcome is SlotOutcome.FIRED
                if metrics is not None:
                    metrics.slot_decided(
                        plan.advance.name,
                        slot.outcome.value,
                        slot.lateness,
                        late=slot.lateness > LATE_AFTER_SECONDS,
                    )
        if fired and self.on_fired is not None:
            self.on_fired()
        return TickReport(decided=decided, fired=fired, passed=passed)

    def _apply_batch(self, batch: list[ScheduleRecord], now: float) -> tuple[list[TickPlan], int]:
        """On the store's thread, as one transaction: claim the batch's schedules, read what
        their overlap policies need, plan each from its row as claimed, then write every
        advance (slot rows, cursor) and every start and cancel request. Answers the plans and
        how many of the batch another worker holds or has decided since the pass read it."""
        journal = self.journal
        self._made.clear()
        with journal.transaction():
            claimed = journal.claim_schedules([r.name for r in batch])
            read = {r.name: r for r in batch}
            mine = [r for r in claimed if _same_tick(r, read[r.name])]
            passed = len(batch) - len(mine)
            if faults.plan is not None and mine:
                faults.point("schedule.after_claim", schedule=_names(mine), claimed=len(mine))
            plans = self._plans(mine, now)
            if not plans:
                return [], passed
            journal.apply(Transaction(writes=tuple(p.advance for p in plans)), now=now)
            if faults.plan is not None:
                slots = sum(len(p.advance.slots) for p in plans)
                faults.point("schedule.after_advance", schedule=_names(plans), slots=slots)
            starts = self._starts(plans, {r.name: r for r in mine})
            if starts:
                journal.apply(Transaction(writes=starts), now=now)
            if faults.plan is not None:
                slots = sum(len(p.advance.slots) for p in plans)
                faults.point("schedule.before_fire", schedule=_names(plans), slots=slots)
        return plans, passed

    def _plans(self, rows: list[ScheduleRecord], now: float) -> list[TickPlan]:
        journal = self.journal
        watched = [r for r in rows if self._spec(r).overlap is not Overlap.ALLOW_ALL]
        lasts = [InstanceId(r.last_instance_id) for r in watched if r.last_instance_id]
        instances = journal.get_instances(lasts) if lasts else {}
        held = [r.name for r in rows if r.buffered_at is not None]
        buffered = journal.buffered_slots_of(held) if held else {}
        plans = []
        for row in rows:
            running = None
            if row.last_instance_id is not None:
                last = instances.get(InstanceId(row.last_instance_id))
                if last is not None and last.status not in FINAL_STATUSES:
                    running = row.last_instance_id
            spec = self._spec(row)
            plan = plan_tick(
                row,
                now=now,
                running=running if spec.overlap is not Overlap.ALLOW_ALL else None,
                instance_for=functools.partial(self._instance_for, spec),
                buffered=buffered.get(row.name, []),
            )
            if plan is not None:
                plans.append(plan)
        return plans

    def _instance_for(self, spec: ScheduleSpec, nominal: float) -> str:
        return self._start(spec, nominal).instance_id

    def _start(self, spec: ScheduleSpec, nominal: float) -> NewInstance:
        # A plan names a fired slot's instance more than once; made once per batch.
        made = self._made.get((spec.name, nominal))
        if made is None:
            encode = self.runtime.codec.encode
            made = start_of(self.registry, encode, spec, key=slot_key(spec.name, nominal))
            self._made[(spec.name, nominal)] = made
        return made

    def _starts(
        self, plans: list[TickPlan], rows: dict[str, ScheduleRecord]
    ) -> tuple[StartInstance | Audited, ...]:
        writes: list[StartInstance | Audited] = []
        for plan in plans:
            spec = self._spec(rows[plan.advance.name])
            writes.extend(StartInstance(new=self._start(spec, f.nominal_at)) for f in plan.firings)
            if plan.cancel is not None:
                writes.append(_cancel_other(spec.name, plan.cancel))
        return tuple(writes)


def _same_tick(claimed: ScheduleRecord, read: ScheduleRecord) -> bool:
    """Whether the schedule claimed is still as the pass read it: otherwise another worker
    decided its slots since (or changed its spec), and this pass leaves it to the next."""
    return (claimed.cursor, claimed.buffered_at, claimed.spec_version) == (
        read.cursor,
        read.buffered_at,
        read.spec_version,
    )


def _names(plans: list[TickPlan] | list[ScheduleRecord]) -> str:
    return ",".join(p.advance.name if isinstance(p, TickPlan) else p.name for p in plans)


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
    return TickReport(
        decided=a.decided + b.decided,
        fired=a.fired + b.fired,
        lost=a.lost + b.lost,
        passed=a.passed + b.passed,
    )


def schedules_task(
    scheduler: Scheduler, *, interval_seconds: float = SCHEDULE_TICK_SECONDS
) -> PeriodicTask:
    """The worker's periodic tick of the journal's schedules (run at the worker's start too)."""

    async def run() -> None:
        await scheduler.tick()

    return PeriodicTask(name="schedules", interval_seconds=interval_seconds, run=run, at_start=True)
