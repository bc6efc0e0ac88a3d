"""What a run costs PostgreSQL: server CPU time and WAL bytes, measured from outside the engines.

CPU: ``pg_stat_statements`` would need ``shared_preload_libraries`` (a server restart), so the
server's own processes are read instead, from ``/proc/<pid>/schedstat`` (nanoseconds on CPU;
``/proc/<pid>/stat``'s utime+stime in clock ticks where schedstat is missing). A thread samples
the backends connected to the run's database every ``SAMPLE_SECONDS`` while the run goes: a
backend already there at ``begin`` counts from its value then, one that connects later from
zero (its connection setup is part of what the engine asks of the server), one that exits
counts its last sample (at most ``SAMPLE_SECONDS`` of its CPU can be missed). This reads the
processes of the machine the benchmark runs on: PostgreSQL must run here too (it reports
``source: unavailable`` otherwise). The server's background processes (WAL writer, checkpointer,
background writer, autovacuum) are summed apart: they serve every database of the server.

WAL: the bytes of the WAL records of the transactions that wrote the run's own schema, and of
the records without a transaction (pruning, hint-bit page images) that touch its tables, from
``pg_walinspect`` (see ``compare_writes.PgWriteCounter``): record bytes, without the WAL pages'
headers and alignment. Beside it, the server-wide WAL written, as the difference of
``pg_current_wal_insert_lsn()`` (which includes every other session on the server).
``pg_stat_wal`` is not used: a backend reports its WAL counters to it at most once a second, so
a run's last second would be missing from a difference taken just after it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import psycopg
from compare_writes import PgWriteCounter

SAMPLE_SECONDS = 0.1
CLIENT = "client backend"
# Processes of the server that work for every database at once.
BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum worker")
CLOCK_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def cpu_ns(pid: int) -> int | None:
    """Nanoseconds process ``pid`` has spent on a CPU; None when it is gone, not readable, or
    not PostgreSQL's (a server in a container reports pids of its own namespace: the process
    with that number here is another one)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() != "postgres":
                return None
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            # Fields after the command (which may hold spaces) : utime is the 14th, stime 15th.
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) * CLOCK_TICK_NS
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _Seen:
    first: int
    last: int
    kind: str


@dataclass
class PgCostMeter:
    """begin() before the workload, end() after its result, while its connections are open."""

    base_url: str
    _seen: dict[int, _Seen] = field(default_factory=dict)
    _lsn_before: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conn: psycopg.Connection[tuple[Any, ...]] | None = None
    _read_any: bool = False

    def begin(self) -> None:
        self._conn = psycopg.connect(self.base_url, autocommit=True)
        self._lsn_before = self._lsn()
        self._sample(initial=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def end(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(initial=False)
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", (self._lsn_before,)
        ).fetchone()
        assert row is not None
        self._conn.close()
        client = [s for s in self._seen.values() if s.kind == CLIENT]
        background = [s for s in self._seen.values() if s.kind != CLIENT]
        return {
            "cpu_source": "/proc/<pid>/schedstat of the server's processes"
            if self._read_any
            else "unavailable (no server process readable here: PostgreSQL on another machine?)",
            "backend_cpu_ms": round(sum(s.last - s.first for s in client) / 1e6, 1),
            "backends": len(client),
            "background_cpu_ms": round(sum(s.last - s.first for s in background) / 1e6, 1),
            "server_wal_bytes": int(row[0]),
        }

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample(initial=False)

    def _lsn(self) -> str:
        assert self._conn is not None
        row = self._conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def _sample(self, *, initial: bool) -> None:
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT pid, backend_type FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND ((datname = current_database() AND "
            "backend_type = %s) OR backend_type = ANY(%s))",
            (CLIENT, list(BACKGROUND)),
        ).fetchall()
        for pid, kind in rows:
            used = cpu_ns(int(pid))
            if used is None:
                continue
            self._read_any = True
            seen = self._seen.get(int(pid))
            if seen is None:
                # There at begin: counted from now. Connected since: counted from zero.
                base = used if initial or kind != CLIENT else 0
                self._seen[int(pid)] = _Seen(first=base, last=used, kind=str(kind))
            else:
                seen.last = used


def per_workflow(cost: dict[str, Any], n: int) -> dict[str, Any]:
    """One run's costs over its n workflows (the JSON's ``db_cost_per_workflow``)."""
    return {
        "backend_cpu_ms": round(cost["backend_cpu_ms"] / n, 4),
        "background_cpu_ms_server_wide": round(cost["background_cpu_ms"] / n, 4),
        "wal_bytes": round(cost["wal_bytes"] / n, 1),
        "wal_bytes_server_wide": round(cost["server_wal_bytes"] / n, 1),
        "schema_bytes": round(cost["schema_bytes"] / n, 1),
        "cpu_source": cost["cpu_source"],
        "backends": cost["backends"],
    }


class PgCostCounter:
    """compare.py's counter on PostgreSQL: durable commits (``PgWriteCounter``) and, with them,
    the run's server CPU and WAL bytes (``costs()`` after ``end()``)."""

    def __init__(self, base_url: str, schema: str, walinspect_schema: str) -> None:
        self.commits = PgWriteCounter(base_url, schema, walinspect_schema)
        self.meter = PgCostMeter(base_url)
        self.base_url = base_url
        self.schema = schema
        self._cost: dict[str, Any] = {}

    def begin(self) -> None:
        # The commit counter's connection opens before the meter starts (so only what it does
        # during the run counts: nothing, it waits) and reads the WAL after the meter stops.
        self.commits.begin()
        self.meter.begin()

    def end(self) -> int:
        self._cost = self.meter.end()
        counted = self.commits.end()
        self._cost["wal_bytes"] = self.commits.wal_bytes
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            # What the run left on disk: its schema's tables, indexes and TOAST.
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'",
                (self.schema,),
            ).fetchone()
        self._cost["schema_bytes"] = int(row[0]) if row else 0
        return counted

    def costs(self) -> dict[str, Any] | None:
        return self._cost
