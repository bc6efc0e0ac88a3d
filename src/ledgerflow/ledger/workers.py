"""The worker registry's records, as the store reads them back (internal).

A :class:`WorkerRecord` is one worker process as it announced itself: where it runs, how many
instances it drives at once, the definitions it serves, and its last heartbeat. Whether it is
*live* is decided by the reader against a bound (see
:attr:`~ledgerflow.model.detection.DetectionBounds.worker_silent_seconds`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ledgerflow.model.ids import WorkerId
from ledgerflow.model.routing import Served


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRecord:
    worker_id: WorkerId
    host: str
    pid: int
    started_at: float
    # How many instances it drives at once (its concurrency).
    slots: int
    heartbeat_at: float
    # Set by a clean shutdown; a worker that died keeps None and simply stops beating.
    stopped_at: float | None = None
    serves: tuple[Served, ...] = ()

    def live(self, *, now: float, silent_seconds: float) -> bool:
        return self.stopped_at is None and now - self.heartbeat_at <= silent_seconds


def served_by(workers: Collection[WorkerRecord]) -> list[Served]:
    """Every definition at least one of ``workers`` serves."""
    return sorted({s for w in workers for s in w.serves})
