"""The live workers, as operators see them: who runs, where, with how many slots, serving what.

A worker is live while its heartbeat in the journal's worker registry is younger than
``worker_silent_seconds`` (a :class:`~ledgerflow.model.detection.DetectionBounds` field, from
``LEDGERFLOW_DETECTION`` by default) and it has not signed off. Workers hold no tenant's data:
they serve definitions for every tenant, so every viewer may list them.

Example::

    for worker in live_workers(store, now=time.time(), bounds=DEFAULT_BOUNDS):
        print(worker.worker_id, [s.label for s in worker.serves])
"""

from __future__ import annotations

from typing import Any

from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.storage.store import DetectionStore


def live_workers(
    store: DetectionStore, *, now: float, bounds: DetectionBounds
) -> list[WorkerRecord]:
    """Workers with a heartbeat within ``bounds.worker_silent_seconds`` of ``now``, oldest
    first, each with the definitions it serves."""
    return store.workers(live_since=now - bounds.worker_silent_seconds)


def worker_json(worker: WorkerRecord, *, now: float) -> dict[str, Any]:
    """One worker as ``ledgerflow workers --json`` and ``GET /v1/workers`` show it."""
    return {
        "worker_id": worker.worker_id,
        "host": worker.host,
        "pid": worker.pid,
        "started_at": worker.started_at,
        "slots": worker.slots,
        "heartbeat_at": worker.heartbeat_at,
        "heartbeat_age_seconds": round(max(0.0, now - worker.heartbeat_at), 3),
        "serves": [
            {
                "workflow_name": s.workflow_name,
                "workflow_version": s.workflow_version,
                "fingerprint": s.fingerprint,
            }
            for s in worker.serves
        ],
    }
