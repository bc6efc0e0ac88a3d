"""Every metric Ledgerflow exports, declared in one place, and the points that move them
(internal; ``docs/observability.md`` lists them for operators).

:class:`Metrics` owns one ``prometheus_client`` registry. The command-line worker and
``ledgerflow serve`` use the process-wide default registry (what ``/metrics`` and
``--metrics-port`` expose); a test or an embedding application makes its own, so engines in one
process never count into each other. An engine without metrics holds ``None`` and every
instrumentation point is one ``is not None`` test: nothing is counted, nothing allocated.

Names are ``ledgerflow_*`` with the unit in the name; labels are the low-cardinality ones only
(workflow, version, participant, operation, kind, outcome, status, reason, how): never an
instance id, a business key or an idempotency key.

The runtime reports what it does as it does it: a commit's writes as they became durable (so
a counter moves exactly once per transition the journal kept), a dispatch's latency, a claim's
lag, a refused stale write. What the journal holds that needs a person (parked and flagged
instances, UNKNOWN effects still open) is read from the journal itself at a bounded rate
(:meth:`Metrics.signals_due`), so every worker reports the same values.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError, EffectRejectedError
from ledgerflow.ledger.records import (
    ConsistencySignals,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    StepWrite,
    Write,
)
from ledgerflow.model.definition import EffectDeclaration
from ledgerflow.model.effect import EffectEvent, EffectState
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceEvent, InstanceStatus
from ledgerflow.model.routing import Served
from ledgerflow.model.step import StepEvent

# Effect dispatches answer in milliseconds to the effect timeout (30 s by default).
_DISPATCH_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Claim lag: due to claimed; a healthy worker pool takes due work within a poll.
_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

_WORKFLOW = ("workflow", "version")
_Labelled = Counter | Histogram
# What a step write counts as, by its event (the others are not outcomes).
_STEP_OUTCOMES = {
    StepEvent.COMPLETE: "completed",
    StepEvent.FAIL: "failed",
    StepEvent.SCHEDULE_RETRY: "retried",
}
# What an effect write counts as, by its event.
_EFFECT_OUTCOMES = {
    EffectEvent.CONFIRM: "confirmed",
    EffectEvent.REJECT_FINAL: "failed",
    EffectEvent.LOSE_OUTCOME: "unknown",
    EffectEvent.ACCEPT: "accepted",
    EffectEvent.SATISFY: "satisfied",
}


class Metrics:
    """Ledgerflow's metrics on one registry (default: the process-wide one).

    Example (an engine that counts into its own registry)::

        metrics = Metrics(CollectorRegistry())
        async with Engine(url, registry, metrics=metrics) as engine: ...
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        signals_seconds: float = limits.METRICS_SIGNALS_SECONDS_DEFAULT,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        # The journal's gauges are read at most this often, whoever asks.
        self.signals_seconds = signals_seconds
        self._signals_read_at: float | None = None
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        try:
            self._declare_instances(self.registry)
            self._declare_effects(self.registry)
            self._declare_machinery(self.registry)
            self._declare_journal_gauges(self.registry)
            self._declare_schedules(self.registry)
        except ValueError as exc:  # prometheus_client: a name already in that registry.
            raise ConfigurationError(
                "this registry already holds Ledgerflow's metrics: share one Metrics between "
                f"engines, or give each its own CollectorRegistry ({exc})"
            ) from None

    def _declare_instances(self, r: CollectorRegistry) -> None:
        wf = _WORKFLOW
        self.instances_started = Counter(
            "ledgerflow_instances_started_total", "Instances started (new, not repeated starts).",
            wf, registry=r,
        )  # fmt: skip
        self.instances_ended = Counter(
            "ledgerflow_instances_ended_total", "Instances that reached a terminal status.",
            (*wf, "status"), registry=r,
        )  # fmt: skip
        self.instances_parked = Counter(
            "ledgerflow_instances_parked_total",
            "Instances a worker parked for a person (MANUAL_INTERVENTION), by reason.",
            (*wf, "reason"), registry=r,
        )  # fmt: skip
        self.instances_adopted = Counter(
            "ledgerflow_instances_adopted_total",
            "Instances a worker adopted onto its own code of their workflow and version after "
            "a clean replay (their pinned code had no live worker).",
            wf, registry=r,
        )  # fmt: skip
        self.steps = Counter(
            "ledgerflow_steps_total",
            "Step outcomes: completed, failed, retried (a retry scheduled).",
            (*wf, "kind", "outcome"), registry=r,
        )  # fmt: skip

    def _declare_effects(self, r: CollectorRegistry) -> None:
        self.effects = Counter(
            "ledgerflow_effects_total",
            "Effect outcomes: confirmed, failed, unknown, accepted (completes by callback).",
            ("participant", "operation", "outcome"), registry=r,
        )  # fmt: skip
        self.compensations = Counter(
            "ledgerflow_compensations_total",
            "Compensation outcomes: confirmed, failed, unknown, satisfied (precondition).",
            ("participant", "operation", "outcome"), registry=r,
        )  # fmt: skip
        self.dispatch_seconds = Histogram(
            "ledgerflow_effect_dispatch_seconds",
            "Time from sending an effect to its answer (ok, rejected, or no_proof).",
            ("participant", "operation", "outcome"), buckets=_DISPATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self.unknown_opened = Counter(
            "ledgerflow_unknown_outcomes_opened_total",
            "Effects whose outcome became UNKNOWN (a lost answer, a crash after dispatch).",
            ("participant", "operation"), registry=r,
        )  # fmt: skip
        self.unknown_settled = Counter(
            "ledgerflow_unknown_outcomes_settled_total",
            "UNKNOWN outcomes settled, by how: lookup, redispatch (same key), operator, "
            "reconciliation.",
            ("participant", "operation", "how"), registry=r,
        )  # fmt: skip

    def _declare_machinery(self, r: CollectorRegistry) -> None:
        wf = _WORKFLOW
        self.claim_lag = Histogram(
            "ledgerflow_claim_lag_seconds",
            "Time from an instance being due to a worker claiming it.",
            wf, buckets=_LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.unserved_instances = Gauge(
            "ledgerflow_instances_unserved",
            "Instances not ended that are pinned to a definition no live worker serves, as a "
            "worker last counted them (at start and every scan interval).",
            ("workflow", "version", "fingerprint"), registry=r,
        )  # fmt: skip
        self._unserved_labels: set[tuple[str, str, str]] = set()
        self.takeovers = Counter(
            "ledgerflow_lease_takeovers_total",
            "Claims of an instance whose previous owner's lease expired (its worker died or "
            "stalled).",
            wf, registry=r,
        )  # fmt: skip
        self.leases_lost = Counter(
            "ledgerflow_leases_lost_total",
            "Leases this worker stopped driving: lost (another owner has it), lapsed (no "
            "renewal for a whole lease) or store (lapsed while its own store did not answer).",
            ("reason",), registry=r,
        )  # fmt: skip
        self.leases_retaken = Counter(
            "ledgerflow_leases_retaken_total",
            "Instances this worker took back after their lease lapsed while its store did not "
            "answer (not counted toward the crash-loop bound).",
            registry=r,
        )  # fmt: skip
        self.stale_writes = Counter(
            "ledgerflow_stale_writes_refused_total",
            "Commits the store refused because their generation was fenced out.",
            wf, registry=r,
        )  # fmt: skip
        self.commit_batch = Histogram(
            "ledgerflow_group_commit_batch_size",
            "Instances' commits that shared one durable transaction.",
            buckets=_BATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self.commit_seconds = Histogram(
            "ledgerflow_group_commit_seconds",
            "Time to make one group of commits durable.",
            buckets=_COMMIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.inbox = Counter(
            "ledgerflow_inbox_events_total",
            "Events delivered to instances (signals, callbacks, approvals), by outcome.",
            ("outcome",), registry=r,
        )  # fmt: skip
        self.reconciliation = Counter(
            "ledgerflow_reconciliation_effects_total",
            "Effects reconciliation compared, by action: matched, corrected, escalated "
            "(drift a person must settle), unreachable.",
            ("action",), registry=r,
        )  # fmt: skip
        self.slots = Gauge(
            "ledgerflow_worker_slots",
            "This process's worker slots, busy or free.",
            ("state",), registry=r,
        )  # fmt: skip
        self.push_wakeup = Gauge(
            "ledgerflow_worker_push_wakeups",
            "1 while this process's worker is woken by pushes from the journal (NOTIFY, SQLite's "
            "data_version), 0 while it only polls (e.g. LISTEN behind PgBouncer's transaction "
            "pooling hears nothing, or the listening connection is reconnecting).",
            registry=r,
        )  # fmt: skip

    def _declare_journal_gauges(self, r: CollectorRegistry) -> None:
        self.parked = Gauge(
            "ledgerflow_parked_instances",
            "Instances in MANUAL_INTERVENTION now, by reason (read from the journal).",
            ("reason",), registry=r,
        )  # fmt: skip
        self.flagged = Gauge(
            "ledgerflow_flagged_instances",
            "Open attention flags now, by reason (read from the journal).",
            ("reason",), registry=r,
        )  # fmt: skip
        self.unknown_open = Gauge(
            "ledgerflow_unknown_outcomes_open",
            "Effects UNKNOWN now (read from the journal).",
            registry=r,
        )  # fmt: skip
        self.unknown_oldest_age = Gauge(
            "ledgerflow_unknown_outcome_oldest_age_seconds",
            "Age of the oldest UNKNOWN effect since its last change; 0 when none is open.",
            registry=r,
        )  # fmt: skip

    # -- what the runtime reports ------------------------------------------------------------

    def _declare_schedules(self, r: CollectorRegistry) -> None:
        self.schedule_slots = Counter(
            "ledgerflow_schedule_slots_total",
            "Schedule slots decided, by outcome: fired, skipped, missed, buffered.",
            ("schedule", "outcome"), registry=r,
        )  # fmt: skip
        self.schedule_lateness = Histogram(
            "ledgerflow_schedule_slot_lateness_seconds",
            "Time from a slot being due (nominal instant plus jitter) to its decision.",
            ("schedule",), buckets=_LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.schedule_late = Counter(
            "ledgerflow_schedule_late_slots_total",
            "Slots decided later than the late bound after they were due (the catch-up "
            "policy decided them).",
            ("schedule",), registry=r,
        )  # fmt: skip
        self.schedule_races = Counter(
            "ledgerflow_schedule_ticks_lost_total",
            "Ticks a worker planned and another worker's tick decided first (rolled back).",
            ("schedule",), registry=r,
        )  # fmt: skip

    def slot_decided(self, schedule: str, outcome: str, lateness: float, *, late: bool) -> None:
        """Count a slot as its tick made it durable."""
        self._child(self.schedule_slots, schedule, outcome.lower()).inc()
        self._child(self.schedule_lateness, schedule).observe(lateness)
        if late:
            self._child(self.schedule_late, schedule).inc()

    def tick_lost(self, schedule: str) -> None:
        """Count a tick that another worker's decided first (rolled back whole)."""
        self._child(self.schedule_races, schedule).inc()

    def started(self, workflow: str, version: int) -> None:
        """Count an instance started (called by the engine)."""
        self._child(self.instances_started, workflow, str(version)).inc()

    def unserved(self, counts: Mapping[Served, int]) -> None:
        """The latest count of instances pinned to definitions no live worker serves; a
        definition no longer counted drops out of the gauge."""
        labels = {
            (s.workflow_name, str(s.workflow_version), s.fingerprint): n for s, n in counts.items()
        }
        for gone in self._unserved_labels - set(labels):
            self.unserved_instances.remove(*gone)
        for label, n in labels.items():
            self.unserved_instances.labels(*label).set(n)
        self._unserved_labels = set(labels)

    def adopted(self, instance: InstanceRecord) -> None:
        """Count an instance adopted by newer code after a clean replay (called by the worker)."""
        self._child(
            self.instances_adopted, instance.workflow_name, str(instance.workflow_version)
        ).inc()

    def committed(self, instance: InstanceRecord, writes: Sequence[Write]) -> None:
        """A commit of ``instance``'s owner became durable: count its transitions."""
        workflow, version = instance.workflow_name, str(instance.workflow_version)
        for write in writes:
            if isinstance(write, StepWrite):
                step_outcome = _STEP_OUTCOMES.get(write.event)
                if step_outcome is not None:
                    kind = write.record.kind.value
                    self._child(self.steps, workflow, version, kind, step_outcome).inc()
            elif isinstance(write, EffectWrite):
                self._effect(write)
            elif isinstance(write, InstanceWrite):
                if write.event is InstanceEvent.PARK:
                    reason = write.reason_code or "unknown"
                    self._child(self.instances_parked, workflow, version, reason).inc()
                if INSTANCE_MACHINE.is_terminal(write.status):
                    self.ended(workflow, version, write.status)

    def ended(self, workflow: str, version: str, status: InstanceStatus) -> None:
        """Count an instance that reached an ending (called by the worker)."""
        self._child(self.instances_ended, workflow, version, status.value).inc()

    def _effect(self, write: EffectWrite) -> None:
        record = write.record
        names = (record.participant, record.operation)
        outcome = _EFFECT_OUTCOMES.get(write.event)
        if outcome is not None:
            counter = self.compensations if record.compensates else self.effects
            self._child(counter, *names, outcome).inc()
        if write.event is EffectEvent.LOSE_OUTCOME and write.expected is not EffectState.UNKNOWN:
            self._child(self.unknown_opened, *names).inc()

    def settled(self, participant: str, operation: str, *, how: str) -> None:
        """An UNKNOWN outcome was settled (``how``: lookup, redispatch, operator,
        reconciliation)."""
        self.unknown_settled.labels(participant, operation, how).inc()

    def dispatched(self, effect: EffectDeclaration, *, seconds: float, answer: object) -> None:
        """A dispatch answered after ``seconds``: with evidence (ok), a proof it was not
        applied (rejected), or no proof either way (no_proof: it raised or timed out)."""
        if isinstance(answer, EffectRejectedError):
            outcome = "rejected"
        else:
            outcome = "no_proof" if isinstance(answer, Exception) else "ok"
        labels = (effect.participant.name, effect.operation, outcome)
        self._child(self.dispatch_seconds, *labels).observe(seconds)

    def claimed(self, records: Iterable[InstanceRecord], *, now: float) -> None:
        """Instances claimed at ``now``: their lag since due, and which were taken over."""
        for record in records:
            labels = (record.workflow_name, str(record.workflow_version))
            self._child(self.claim_lag, *labels).observe(max(0.0, now - record.available_at))
            if record.lease_expiries > 0:
                self.takeovers.labels(*labels).inc()

    def fenced(self, instance: InstanceRecord) -> None:
        """Count a write refused because its owner's generation was stale."""
        self.stale_writes.labels(instance.workflow_name, str(instance.workflow_version)).inc()

    def lease_lost(self, reason: str) -> None:
        """Count a lease this worker lost, by reason."""
        self.leases_lost.labels(reason).inc()

    def lease_retaken(self) -> None:
        """Count a lapsed lease of this worker's own that it renewed."""
        self.leases_retaken.inc()

    def group_committed(self, *, size: int, seconds: float) -> None:
        """Observe one group commit: how many writes it held and how long it took."""
        self.commit_batch.observe(size)
        self.commit_seconds.observe(seconds)

    def delivered(self, outcome: str) -> None:
        """Count an event delivered to an inbox, by outcome."""
        self._child(self.inbox, outcome).inc()

    def reconciled(self, *, matched: int, corrected: int, escalated: int, unreachable: int) -> None:
        """Count one reconciliation pass's actions (matched, corrected, escalated, unreachable)."""
        for action, n in (
            ("matched", matched),
            ("corrected", corrected),
            ("escalated", escalated),
            ("unreachable", unreachable),
        ):
            if n:
                self.reconciliation.labels(action).inc(n)

    def push_wakeups(self, *, pushing: bool) -> None:
        """Whether this process's worker is woken by pushes now (1) or only polls (0)."""
        self.push_wakeup.set(1 if pushing else 0)

    def watch_slots(self, busy: Callable[[], int], capacity: int) -> None:
        """The worker slots gauge, read from the worker when scraped (nothing per instance);
        a process with several workers reports the last one watched."""
        self.slots.labels("busy").set_function(busy)
        self.slots.labels("free").set_function(lambda: max(0, capacity - busy()))

    def _child(self, metric: _Labelled, *values: str) -> Any:
        """The child of ``metric`` for these label values, cached: ``labels()`` validates and
        locks on every call, and the hot path counts several times per workflow. The cache is
        bounded by the labels' own (low) cardinality."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    # -- what the journal says ---------------------------------------------------------------

    def signals_due(self) -> bool:
        """Whether the journal's gauges are older than ``signals_seconds`` (then read them and
        call :meth:`signals`); bounded, so scrapes and workers never hammer the journal."""
        read_at = self._signals_read_at
        return read_at is None or time.monotonic() - read_at >= self.signals_seconds

    def signals(self, signals: ConsistencySignals, *, now: float) -> None:
        """Set the consistency gauges (parked, flagged, UNKNOWN outcomes and their age) from a
        reading of the journal."""
        self._signals_read_at = time.monotonic()
        _set_by_reason(self.parked, signals.parked_by_reason)
        _set_by_reason(self.flagged, signals.flagged_by_reason)
        self.unknown_open.set(signals.unknown_open)
        oldest = signals.unknown_oldest_at
        self.unknown_oldest_age.set(0.0 if oldest is None else max(0.0, now - oldest))


def _set_by_reason(gauge: Gauge, counts: dict[str, int]) -> None:
    # A reason whose last instance left goes to 0 rather than vanishing, so alerts on it clear.
    for (reason,) in [key for key in _children(gauge) if key[0] not in counts]:
        gauge.labels(reason).set(0)
    for reason, n in counts.items():
        gauge.labels(reason).set(n)


def _children(gauge: Gauge) -> list[tuple[str, ...]]:
    return [
        tuple(sample.labels.values()) for metric in gauge.collect() for sample in metric.samples
    ]
