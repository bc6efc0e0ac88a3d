"""The worker registry part of the SQL store: workers announce themselves and beat (internal).

Each call is one short transaction of the worker's own, never fenced (a worker row is not an
instance). Registering prunes the rows of workers silent for longer than the retention bound,
so the registry stays bounded however many deploys pass.
"""

from __future__ import annotations

from ledgerflow import limits
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.detection import UnservedCount, UnservedInstance
from ledgerflow.model.ids import WorkerId
from ledgerflow.model.routing import Served, served_json
from ledgerflow.storage.rows import Row, record_from_row
from ledgerflow.storage.sql_seam import SqlSeam


def _workers_from_rows(rows: list[Row]) -> list[WorkerRecord]:
    """One record per worker from rows of one definition each (in the query's order)."""
    found: dict[str, tuple[Row, list[Served]]] = {}
    for row in rows:
        _, serves = found.setdefault(row["worker_id"], (row, []))
        if row["workflow_name"] is not None:
            serves.append(
                Served(row["workflow_name"], int(row["workflow_version"]), row["fingerprint"])
            )
    return [
        WorkerRecord(
            worker_id=WorkerId(row["worker_id"]),
            host=row["host"],
            pid=int(row["pid"]),
            started_at=float(row["started_at"]),
            slots=int(row["slots"]),
            heartbeat_at=float(row["heartbeat_at"]),
            stopped_at=None if row["stopped_at"] is None else float(row["stopped_at"]),
            serves=tuple(serves),
        )
        for row, serves in found.values()
    ]


class WorkerStore(SqlSeam):
    def register_worker(self, worker: WorkerRecord, *, now: float) -> None:
        """Announce (or announce again) a worker and what it serves; live from ``now``."""
        with self._write_transaction():
            before = {"before": now - limits.WORKER_RETENTION_SECONDS}
            self._run("prune_worker_definitions", before)
            self._run("prune_workers", before)
            self._run(
                "upsert_worker",
                {
                    "worker_id": worker.worker_id,
                    "host": worker.host,
                    "pid": worker.pid,
                    "started_at": worker.started_at,
                    "slots": worker.slots,
                    "heartbeat_at": now,
                },
            )
            self._run("forget_worker_definitions", {"worker_id": worker.worker_id})
            self._run(
                "insert_worker_definitions",
                {"worker_id": worker.worker_id, "serves": served_json(worker.serves)},
            )

    def heartbeat_worker(self, worker_id: WorkerId, *, now: float) -> bool:
        """Renew a worker's heartbeat; False when it is not registered (it registers again)."""
        with self._write_transaction():
            _, changed = self._run("heartbeat_worker", {"worker_id": worker_id, "now": now})
        return changed == 1

    def stop_worker(self, worker_id: WorkerId, *, now: float) -> None:
        """A clean shutdown: the worker is no longer live."""
        with self._write_transaction():
            self._run("stop_worker", {"worker_id": worker_id, "now": now})

    def workers(
        self, *, live_since: float | None, limit: int = limits.WORKERS_LISTED_MAX
    ) -> list[WorkerRecord]:
        """Workers with a heartbeat since ``live_since`` and not stopped (every one when
        None), oldest first, with what each serves."""
        with self._read():
            rows, _ = self._run("select_workers", {"live_since": live_since, "limit": limit})
        return _workers_from_rows(rows)

    def unserved_instances(
        self, *, now: float, cutoff: float, live_since: float, limit: int
    ) -> list[UnservedInstance]:
        """Runnable instances due since ``cutoff`` (no live lease) whose definition no worker
        with a heartbeat since ``live_since`` serves."""
        params = {"now": now, "cutoff": cutoff, "live_since": live_since, "limit": limit}
        with self._read():
            rows, _ = self._run("scan_unserved", params)
        return [record_from_row(UnservedInstance, r) for r in rows]

    def unserved_counts(
        self, *, live_since: float, now: float, limit: int = limits.WORKERS_LISTED_MAX
    ) -> list[UnservedCount]:
        """Per definition no worker with a heartbeat since ``live_since`` serves: its instances
        not ended, and how many are due at ``now``."""
        params = {"live_since": live_since, "now": now, "limit": limit}
        with self._read():
            rows, _ = self._run("count_unserved", params)
        return [record_from_row(UnservedCount, r) for r in rows]
