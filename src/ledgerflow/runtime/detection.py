"""The stuck-work scan: raise a flag for what needs a person, clear what no longer does (internal).

Detection is the engine watching its own work, with no person and no authority involved: a
claim parks a crash loop and sets a damaged row aside, the local-step driver parks a poison
step, and this scan flags stuck work and due work that no live worker serves (routing by
capability never hands it to a worker that cannot run it, so only a flag makes it visible).
Every worker runs it periodically (its builder hands the
worker :func:`detection_task`, see :meth:`~ledgerflow.runtime.engine.Engine.worker`) and an
operator can run it on demand (``ledgerflow attention --scan``). The SQL only narrows the
candidates (rows past a cutoff); the rules in :mod:`ledgerflow.model.detection` decide and word
the evidence. A scan never parks an instance: stuck work may still move on by itself, so it
is flagged, not parked, and a flag whose condition a later scan no longer finds is cleared by
``detector``. The one change a scan makes is a due time: a waiting instance that holds an
arrival it sleeps past (a lost wake-up, ``stuck_arrival``) is made due now as well as flagged.

Example::

    report = scan(store, DetectionBounds(step_deadline_seconds=60), now=time.time())
    for finding in report.raised:
        print(finding.instance_id, finding.reason_code, finding.evidence)
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from dataclasses import dataclass

from ledgerflow.ledger.attention import AttentionFlag
from ledgerflow.ledger.workers import served_by
from ledgerflow.model import detection
from ledgerflow.model.detection import (
    DEFAULT_BOUNDS,
    DetectionBounds,
    Finding,
    HeldArrival,
    SilentEffect,
)
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.model.routing import Served
from ledgerflow.runtime.periodic import PeriodicTask
from ledgerflow.runtime.seams import Runtime
from ledgerflow.storage.store import DetectionStore

log = logging.getLogger("ledgerflow.worker")

# Bounds for workers, e.g. "step_deadline_seconds=60,participant_silent_seconds=30".
ENVIRONMENT_VARIABLE = "LEDGERFLOW_DETECTION"


def bounds_from_environment() -> DetectionBounds:
    """The bounds ``LEDGERFLOW_DETECTION`` sets, the defaults for the rest."""
    text = os.environ.get(ENVIRONMENT_VARIABLE, "")
    return DetectionBounds.parse(text) if text.strip() else DEFAULT_BOUNDS


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanReport:
    at: float
    # Flags this scan opened (an open flag found again is counted in still_open).
    raised: tuple[Finding, ...]
    still_open: int
    # (instance id, reason code) of flags cleared because their condition is gone.
    cleared: tuple[tuple[str, str], ...]
    # Damaged rows set aside by a claim that read cleanly again and are due now.
    requeued: tuple[str, ...]
    # Reasons whose candidates filled the scan's row bound: their flags are not cleared this
    # time (an instance past the bound is not evidence that its condition is gone).
    truncated: tuple[str, ...]


def _findings(
    store: DetectionStore, bounds: DetectionBounds, now: float
) -> tuple[dict[str, list[Finding]], list[str]]:
    """What each scanned rule finds, and the reasons whose candidates filled the row bound."""
    limit = bounds.scan_rows_max
    quiet = store.quiet_instances(now=now, cutoff=now - bounds.step_deadline_seconds, limit=limit)
    due = store.due_instances(now=now, cutoff=now - bounds.unclaimed_after_seconds, limit=limit)
    silent = store.silent_effects(
        now=now, cutoff=now - bounds.participant_silent_seconds, limit=limit
    )
    live_since = now - bounds.worker_silent_seconds
    unserved = store.unserved_instances(
        now=now, cutoff=now - bounds.unserved_after_seconds, live_since=live_since, limit=limit
    )
    held = store.held_arrivals(now=now, cutoff=now - bounds.arrival_unanswered_seconds, limit=limit)
    # What the live workers serve, to say in the evidence what is there instead.
    live = served_by(store.workers(live_since=live_since)) if unserved else []
    by_instance: dict[str, list[SilentEffect]] = defaultdict(list)
    for effect in silent:
        by_instance[effect.instance_id].append(effect)
    held_by: dict[str, list[HeldArrival]] = defaultdict(list)
    for arrival in held:
        held_by[arrival.instance_id].append(arrival)
    found = {
        detection.STUCK_STEP: [detection.stuck_step(q, now=now, bounds=bounds) for q in quiet],
        detection.STUCK_UNCLAIMED: [
            detection.stuck_unclaimed(d, now=now, bounds=bounds) for d in due
        ],
        detection.PARTICIPANT_UNRESPONSIVE: [
            detection.participant_unresponsive(group, now=now, bounds=bounds)
            for group in by_instance.values()
        ],
        detection.NO_CAPABLE_WORKER: [
            detection.no_capable_worker(u, now=now, bounds=bounds, live=live) for u in unserved
        ],
        detection.STUCK_ARRIVAL: [
            detection.stuck_arrival(group, now=now, bounds=bounds) for group in held_by.values()
        ],
    }
    read = {
        detection.STUCK_STEP: len(quiet),
        detection.STUCK_UNCLAIMED: len(due),
        detection.PARTICIPANT_UNRESPONSIVE: len(silent),
        detection.NO_CAPABLE_WORKER: len(unserved),
        detection.STUCK_ARRIVAL: len(held),
    }
    truncated = [reason for reason, count in read.items() if count >= limit]
    return {r: [f for f in fs if f is not None] for r, fs in found.items()}, truncated


def scan(
    store: DetectionStore,
    bounds: DetectionBounds = DEFAULT_BOUNDS,
    *,
    now: float,
    detected_by: str = detection.DETECTOR,
) -> ScanReport:
    """Flag stuck work, clear flags whose condition is gone, requeue repaired damaged rows."""
    # Open flags are read first: a flag another scan raises meanwhile is not cleared here.
    open_flags = store.open_flags()
    found, truncated = _findings(store, bounds, now)
    raised: list[Finding] = []
    still_open = 0
    current: set[tuple[str, str]] = set()
    for findings in found.values():
        for finding in findings:
            current.add((finding.instance_id, finding.reason_code))
            if store.raise_flag(
                instance_id=InstanceId(finding.instance_id),
                reason_code=finding.reason_code,
                evidence=finding.evidence,
                detected_by=detected_by,
                now=now,
            ):
                raised.append(finding)
            else:
                still_open += 1
            if finding.reason_code == detection.STUCK_ARRIVAL:
                # The one finding a scan acts on: what arrived must not wait for a person.
                store.wake_held(InstanceId(finding.instance_id), now=now)
    cleared: list[tuple[str, str]] = []
    requeued: list[str] = []
    live = served_by(store.workers(live_since=now - bounds.worker_silent_seconds))
    for flag in open_flags:
        key = (flag.instance_id, flag.reason_code)
        if flag.reason_code in (detection.REPLAY_DIVERGENCE, detection.ADOPTION_REFUSED):
            if _divergence_settled(store, flag, live) and store.clear_flag(
                instance_id=flag.instance_id,
                reason_code=flag.reason_code,
                cleared_by=detection.DETECTOR,
                reason="the instance ended, or a live worker serves the code it is pinned to",
                now=now,
            ):
                cleared.append(key)
            continue
        if flag.reason_code == detection.POISON_CORRUPT_ROW:
            if store.requeue_repaired(flag.instance_id, cleared_by=detection.DETECTOR, now=now):
                requeued.append(flag.instance_id)
            continue
        if flag.reason_code not in detection.SCANNED_FLAGS or flag.reason_code in truncated:
            continue
        if key not in current and store.clear_flag(
            instance_id=flag.instance_id,
            reason_code=flag.reason_code,
            cleared_by=detection.DETECTOR,
            reason=f"the condition no longer holds (scan by {detected_by})",
            now=now,
        ):
            cleared.append(key)
    return ScanReport(
        at=now,
        raised=tuple(raised),
        still_open=still_open,
        cleared=tuple(cleared),
        requeued=tuple(requeued),
        truncated=tuple(truncated),
    )


def _divergence_settled(store: DetectionStore, flag: AttentionFlag, live: list[Served]) -> bool:
    """Whether a ``replay_divergence`` flag's instance no longer waits for a worker that can
    run it: it has ended, or a live worker serves the code it is pinned to (its old code came
    back, or an operator moved it). An ``adoption_refused`` flag also once its run holds no
    UNKNOWN effect any more (an operator settled it: a worker may adopt it now)."""
    instance = store.get_instance(InstanceId(flag.instance_id))
    if instance is None or instance.status in TERMINAL_STATUSES:
        return True
    pinned = Served(instance.workflow_name, instance.workflow_version, instance.fingerprint)
    if pinned in live:
        return True
    if flag.reason_code != detection.ADOPTION_REFUSED:
        return False
    effects = store.journal(instance.instance_id, instance.run).effects.values()
    return not any(e.state is EffectState.UNKNOWN for e in effects)


def detection_task(
    runtime: Runtime, store: DetectionStore, bounds: DetectionBounds, *, detected_by: str
) -> PeriodicTask:
    """The scan as a worker's periodic task, every ``bounds.scan_interval_seconds``, run on the
    worker's store thread; each flag it raises is logged."""
    thread, clock = runtime.store, runtime.clock

    async def run() -> None:
        report = await thread.call(scan, store, bounds, now=clock.now(), detected_by=detected_by)
        for finding in report.raised:
            log.warning(
                "instance flagged for attention (%s): %s",
                finding.reason_code,
                finding.evidence,
                extra={"instance": finding.instance_id, "worker": detected_by},
            )

    return PeriodicTask(name="detection", interval_seconds=bounds.scan_interval_seconds, run=run)
