"""Ledgerflow side by side with DBOS Transact 3.4, on SQLite and PostgreSQL, at equal durability.

    python bench/compare.py --quick     # small sizes, one run, under a minute
    python bench/compare.py             # 1,000 concurrent instances, medians of 3 runs

For each backend: the raw storage limit (single-row durable commits per second), then the
workloads ``steps3_sequential``, ``steps3_concurrent``, ``effects3_concurrent`` and
``recovery``, each run on both engines one after the other (the order alternates from run to
run), every run in its own subprocess on its own fresh store (a new SQLite file or a new
PostgreSQL schema). Durable writes per workflow are counted from outside the engines in a
separate counting run (the only run with ``--quick``); see ``compare_writes.py``.

Progress goes to stderr; the last line of stdout is one JSON object. ``--role`` is how this
script runs itself as a workload subprocess (``compare_ledgerflow.py``, ``compare_dbos.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol

import psycopg
from compare_common import BLOCK_STEP2_ENV, STARTS_ENV, say
from compare_db_cost import PgCostCounter, per_workflow
from compare_storage_limit import pg_limits, sqlite_commits_per_second
from compare_writes import SqliteWriteCounter, ensure_walinspect
from psycopg import sql

ENGINES = ("ledgerflow", "dbos")
BACKENDS = ("sqlite", "postgres")
# name -> (workflow, mode)
WORKLOADS = {
    "steps3_sequential": ("steps3", "sequential"),
    "steps3_concurrent": ("steps3", "concurrent"),
    "effects3_concurrent": ("effects3", "concurrent"),
    "recovery": ("steps3", "recovery"),
}
PG_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
PG_CONNECT_TIMEOUT_SECONDS = 3
SCHEMA_PREFIX = "bench_compare"
FULL = {"runs": 3, "sequential": 300, "concurrent": 1_000, "limit_seconds": 2.0}
QUICK = {"runs": 1, "sequential": 20, "concurrent": 100, "limit_seconds": 0.5}
# The killed worker's lease: a fresh Ledgerflow worker takes an instance over only once the
# dead owner's lease has lapsed (DBOS instead recovers every PENDING workflow of its own
# executor id at launch, trusting that no other process runs under that id).
RECOVERY_LEASE_SECONDS = 1.0
# Bounds: no step of the orchestration waits forever.
ROLE_LINE_SECONDS_MAX = 600.0
ROLE_EXIT_SECONDS_MAX = 60.0


class WriteCounter(Protocol):
    def begin(self) -> None: ...
    def end(self) -> int: ...
    def costs(self) -> dict[str, Any] | None: ...


# -- one fresh store per role run --------------------------------------------------------------


@dataclass
class Store:
    backend: str
    path: str = ""  # SQLite file
    base_url: str = ""  # PostgreSQL
    schema: str = ""

    def role_args(self) -> list[str]:
        if self.backend == "sqlite":
            return ["--backend", "sqlite", "--path", self.path]
        return ["--backend", "postgres", "--base-url", self.base_url, "--schema", self.schema]

    def ledgerflow_url(self) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self.path}"  # no ?synchronous=: the durable default, FULL
        joiner = "&" if "?" in self.base_url else "?"
        return f"{self.base_url}{joiner}schema={self.schema}"


@dataclass
class Context:
    args: argparse.Namespace
    folder: str
    pg_url: str
    walinspect_schema: str
    counter: int = 0
    durability_seen: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fresh_store(self, backend: str, engine: str, label: str) -> Store:
        self.counter += 1
        if backend == "sqlite":
            path = os.path.join(self.folder, f"{self.counter:03d}-{engine}-{label}.db")
            if engine == "dbos":
                # DBOS opens SQLite in its default rollback-journal mode; WAL is a property
                # of the file, so it is set here, before DBOS first opens it (its connections
                # then also set synchronous=FULL: compare_dbos.durable_connection).
                with contextlib.closing(sqlite3.connect(path)) as conn:
                    conn.execute("PRAGMA journal_mode=WAL")
            return Store(backend="sqlite", path=path)
        schema = f"{SCHEMA_PREFIX}_{os.getpid()}_{self.counter:03d}_{engine}"
        drop_schema(self.pg_url, schema)
        return Store(backend="postgres", base_url=self.pg_url, schema=schema)

    def counter_for(self, store: Store) -> WriteCounter:
        if store.backend == "sqlite":
            return SqliteWriteCounter(store.path)
        return PgCostCounter(store.base_url, store.schema, self.walinspect_schema)

    def dispose(self, store: Store) -> None:
        if store.backend == "postgres":
            drop_schema(store.base_url, store.schema)
        else:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(store.path + suffix)


def drop_schema(base_url: str, schema: str) -> None:
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- a role subprocess -------------------------------------------------------------------------


class Role:
    """One workload subprocess and the lines it prints (read on a thread, so every wait is
    bounded)."""

    def __init__(self, engine: str, store: Store, workload: str, mode: str, n: int) -> None:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--role",
            engine,
            *store.role_args(),
            "--db",
            store.ledgerflow_url(),
            "--workload",
            workload,
            "--mode",
            mode,
            "--n",
            str(n),
            "--lease-seconds",
            str(RECOVERY_LEASE_SECONDS),
        ]
        env = dict(os.environ)
        env.pop(BLOCK_STEP2_ENV, None)
        if mode == "recovery-load":
            env[BLOCK_STEP2_ENV] = "1"
        self.label = f"{engine} {workload} {mode}"
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, word: str) -> str:
        """Wait for the line starting with ``word``; other stdout lines go to stderr."""
        deadline = time.monotonic() + ROLE_LINE_SECONDS_MAX
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(f"{self.label}: no {word!r} in time") from None
            if line is None:
                code = self.proc.wait()
                raise RuntimeError(f"{self.label}: exited ({code}) before {word!r}")
            if line.split(" ", 1)[0] == word:
                return line[len(word) :].strip()
            print(f"  [{self.label}] {line}", file=sys.stderr, flush=True)

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict[str, Any]:
        figures: dict[str, Any] = json.loads(self.expect("result"))
        return figures

    def finish(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.send("exit")
        try:
            code = self.proc.wait(timeout=ROLE_EXIT_SECONDS_MAX)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"{self.label}: did not exit") from None
        if code != 0:
            raise RuntimeError(f"{self.label}: exit code {code}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def run_once(
    ctx: Context, backend: str, engine: str, name: str, n: int, count: bool
) -> dict[str, Any]:
    """One engine, one workload, on a fresh store: the role's figures, plus ``writes``."""
    workflow, mode = WORKLOADS[name]
    store = ctx.fresh_store(backend, engine, name)
    counter = ctx.counter_for(store) if count else None
    try:
        if mode == "recovery":
            figures = run_recovery(store, engine, workflow, n, counter)
        else:
            role = Role(engine, store, workflow, mode, n)
            try:
                role.expect("ready")
                if counter is not None:
                    counter.begin()
                role.send("go")
                figures = role.result()
                if counter is not None:
                    figures["writes"] = counter.end()
                    figures["db_cost"] = counter.costs()
                role.finish()
            finally:
                role.kill()
    finally:
        ctx.dispose(store)
    if figures.get("succeeded") != n:
        raise RuntimeError(f"{engine} {name}: {figures.get('succeeded')} of {n} succeeded")
    if "durability_seen" in figures:
        ctx.durability_seen.setdefault(f"{backend}/{engine}", figures["durability_seen"])
    return figures


def run_recovery(
    store: Store, engine: str, workflow: str, n: int, counter: WriteCounter | None
) -> dict[str, Any]:
    """Every instance blocked in step 2, the process SIGKILLed, a fresh one finishes them."""
    load = Role(engine, store, workflow, "recovery-load", n)
    try:
        load.expect("ready")
        if counter is not None:
            counter.begin()
        load.send("go")
        load.expect("started")
    finally:
        load.kill()
    fresh = Role(engine, store, workflow, "recovery-finish", n)
    try:
        fresh.expect("ready")
        fresh.send("go")
        figures = fresh.result()
        if counter is not None:
            # Everything the interrupted and the fresh process wrote, over n instances.
            figures["writes"] = counter.end()
            figures["db_cost"] = counter.costs()
        fresh.finish()
    finally:
        fresh.kill()
    return figures


# -- the comparison ----------------------------------------------------------------------------


def size_of(name: str, sizes: dict[str, Any]) -> int:
    return int(sizes["sequential"] if name.endswith("sequential") else sizes["concurrent"])


def compare_backend(ctx: Context, backend: str, sizes: dict[str, Any]) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {e: [] for e in ENGINES} for name in WORKLOADS
    }
    counted: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in WORKLOADS}
    passes = sizes["runs"] + (0 if ctx.args.quick else 1)
    for k in range(passes):
        # With --quick the one run is also the counting run; otherwise the counting run is an
        # extra one, kept out of the medians (its open reader spares SQLite its checkpoints).
        counting = ctx.args.quick or k == sizes["runs"]
        for name in WORKLOADS:
            order = ENGINES if k % 2 == 0 else tuple(reversed(ENGINES))
            for engine in order:
                n = size_of(name, sizes)
                say(f"{backend} pass {k + 1}/{passes} {name} {engine} n={n}")
                figures = run_once(ctx, backend, engine, name, n, counting)
                say(f"  -> {figures['wps']} wf/s, writes {figures.get('writes', '-')}")
                if counting:
                    counted[name][engine] = figures
                if ctx.args.quick or not counting:
                    runs[name][engine].append(figures)
    return summarise(runs, counted, sizes)


def median_of(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def summarise(
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    counted: dict[str, dict[str, dict[str, Any]]],
    sizes: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, by_engine in runs.items():
        wps = {e: median_of([r["wps"] for r in by_engine[e]]) for e in ENGINES}
        n = size_of(name, sizes)
        entry: dict[str, Any] = {
            "ledgerflow_wps": wps["ledgerflow"],
            "dbos_wps": wps["dbos"],
            "ratio": round(wps["ledgerflow"] / wps["dbos"], 3),
            "writes_per_workflow": {e: round(counted[name][e]["writes"] / n, 3) for e in ENGINES},
            "start_latency_ms": {
                e: {
                    q: median_of([r["start_latency_ms"][q] for r in by_engine[e]])
                    for q in ("p50", "p99")
                }
                for e in ENGINES
            },
            "instances": n,
            # PostgreSQL's CPU and WAL, from the counting run (compare_db_cost.py).
            "db_cost_per_workflow": {
                e: per_workflow(cost, n)
                for e in ENGINES
                if (cost := counted[name][e].get("db_cost"))
            },
            "wps_each_run": {e: [r["wps"] for r in by_engine[e]] for e in ENGINES},
        }
        if name == "recovery":
            entry["seconds"] = {e: median_of([r["seconds"] for r in by_engine[e]]) for e in ENGINES}
        out[name] = entry
    effects = out["effects3_concurrent"]
    effects["ratio_vs_dbos_steps3"] = round(
        effects["ledgerflow_wps"] / out["steps3_concurrent"]["dbos_wps"], 3
    )
    return out


# -- PostgreSQL availability, settings ---------------------------------------------------------


def pg_url_of(args: argparse.Namespace) -> str:
    return str(
        args.postgres_url
        or os.environ.get("LEDGERFLOW_BENCH_POSTGRES_URL")
        or os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL")
        or PG_URL_DEFAULT
    )


def pg_settings(base_url: str) -> dict[str, Any] | str:
    """The server's durability settings, or why PostgreSQL cannot be used."""
    try:
        with psycopg.connect(
            base_url, autocommit=True, connect_timeout=PG_CONNECT_TIMEOUT_SECONDS
        ) as conn:
            found: dict[str, Any] = {}
            for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method"):
                row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
                found[name] = row[0] if row else None
            # A per-database or per-role override would change synchronous_commit for the
            # engines' sessions without showing in SHOW here: there must be none.
            row = conn.execute(
                "SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d "
                "ON d.oid = s.setdatabase OR s.setdatabase = 0 "
                "WHERE d.datname = current_database() "
                "AND array_to_string(s.setconfig, ',') LIKE '%synchronous_commit%'"
            ).fetchone()
            found["synchronous_commit_overrides"] = int(row[0]) if row else 0
            return found
    except psycopg.Error as exc:
        return f"PostgreSQL unreachable at {base_url}: {str(exc).strip()}"


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "dbos": metadata.version("dbos"),
        "ledgerflow": metadata.version("ledgerflow"),
    }


def run_compare(args: argparse.Namespace) -> dict[str, Any]:
    sizes = dict(QUICK if args.quick else FULL)
    if args.runs:
        sizes["runs"] = args.runs
    if args.concurrent:
        sizes["concurrent"] = args.concurrent
    if args.sequential:
        sizes["sequential"] = args.sequential
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    pg_url = pg_url_of(args)
    result: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ledgerflow-compare-") as folder:
        ctx = Context(args=args, folder=folder, pg_url=pg_url, walinspect_schema="")
        if "sqlite" in args.backends:
            say("sqlite: storage limit")
            limits["sqlite"] = sqlite_commits_per_second(folder, sizes["limit_seconds"])
            result["sqlite"] = compare_backend(ctx, "sqlite", sizes)
        if "postgres" in args.backends:
            server = pg_settings(pg_url)
            if isinstance(server, str):
                say(f"postgres skipped: {server}")
                result["postgres"] = {"skipped": server}
                limits["postgres"] = {"skipped": server}
            else:
                settings["postgres_server"] = server
                found = ensure_walinspect(pg_url)
                if isinstance(found, tuple):
                    result["postgres"] = {"skipped": found[0]}
                    limits["postgres"] = {"skipped": found[0]}
                else:
                    ctx.walinspect_schema = found
                    say("postgres: storage limit")
                    limit_schema = f"{SCHEMA_PREFIX}_{os.getpid()}_limit"
                    drop_schema(pg_url, limit_schema)
                    with psycopg.connect(pg_url, autocommit=True) as conn:
                        conn.execute(
                            sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(limit_schema))
                        )
                    try:
                        limits["postgres"] = pg_limits(pg_url, limit_schema, sizes["limit_seconds"])
                    finally:
                        drop_schema(pg_url, limit_schema)
                    result["postgres"] = compare_backend(ctx, "postgres", sizes)
        seen = ctx.durability_seen
    settings.update(
        {
            "quick": args.quick,
            "ledgerflow_starts": args.starts,
            "runs": sizes["runs"],
            "instances": {"sequential": sizes["sequential"], "concurrent": sizes["concurrent"]},
            "figure": "medians over the runs; runs alternate which engine goes first",
            "durability": {
                "sqlite": {
                    "ledgerflow": "its default: journal_mode=WAL, synchronous=FULL "
                    "(URL without ?synchronous=)",
                    "dbos": "file put in WAL mode before DBOS opens it; synchronous=FULL set "
                    "on every DBOS connection",
                    "read_back": {e: seen.get(f"sqlite/{e}", {}) for e in ENGINES},
                    "storage_limit": limits.get("sqlite", {}).get("settings", {}),
                },
                "postgres": {
                    "both": "server default synchronous_commit=on, no override by either "
                    "engine, database or role",
                    "read_back": {e: seen.get(f"postgres/{e}", {}) for e in ENGINES},
                },
            },
            "ledgerflow_worker": {
                "concurrency": "1 sequential, n concurrent (at most 1,000)",
                "steps": "async def",
                "end_of_instance_seen_by": "Worker.driven, polled every 1 ms",
                "recovery_killed_worker_lease_seconds": RECOVERY_LEASE_SECONDS,
            },
            "dbos_workflows": "sync @DBOS.workflow/@DBOS.step, DBOS.start_workflow + "
            "handle.get_result(); recovery by DBOS.launch() in a fresh process",
            "writes_per_workflow_method": {
                "sqlite": "commit frames appended to the WAL while a reader pins it",
                "postgres": "pg_walinspect COMMIT records of transactions that wrote the "
                "run's own schema",
                "recovery": "writes of the interrupted and the fresh process, per instance",
            },
            "db_cost_method": {
                "backend_cpu_ms": "CPU of the server backends connected to the run's database, "
                "from /proc/<pid>/schedstat sampled every 0.1 s (pg_stat_statements needs "
                "shared_preload_libraries)",
                "background_cpu_ms_server_wide": "WAL writer, checkpointer, background writer "
                "and autovacuum: they serve every database of the server",
                "wal_bytes": "pg_walinspect record lengths of the transactions that wrote the "
                "run's schema, and of records without a transaction touching its tables",
                "wal_bytes_server_wide": "pg_current_wal_insert_lsn() difference: every "
                "session of the server",
                "schema_bytes": "pg_total_relation_size of the run's tables (indexes and "
                "TOAST included) after it: what the journal keeps per workflow",
                "run": "the counting run, per workflow",
            },
            "machine": machine(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "wall_seconds": round(time.perf_counter() - t0, 1),
        }
    )
    for backend in BACKENDS:
        result.setdefault(backend, {"skipped": "not selected (--backends)"})
    result["limits"] = limits
    result["settings"] = settings
    return result


# -- command line ------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, one run (under 60 s)")
    p.add_argument("--runs", type=int, help="runs per workload and engine (median taken)")
    p.add_argument("--concurrent", type=int, help="instances of the concurrent workloads")
    p.add_argument("--sequential", type=int, help="instances of the sequential workload")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--postgres-url", help="default: $LEDGERFLOW_BENCH_POSTGRES_URL, ...")
    # The role subprocesses (this script runs itself).
    p.add_argument("--role", choices=("compare", *ENGINES), default="compare")
    p.add_argument("--backend", choices=BACKENDS)
    p.add_argument("--path", help="SQLite file (role)")
    p.add_argument("--base-url", help="PostgreSQL URL (role)")
    p.add_argument("--schema", help="PostgreSQL schema (role)")
    p.add_argument("--db", help="Ledgerflow store URL (role)")
    p.add_argument("--workload", choices=("steps3", "effects3"))
    p.add_argument(
        "--mode", choices=("sequential", "concurrent", "recovery-load", "recovery-finish")
    )
    p.add_argument("--n", type=int)
    p.add_argument("--lease-seconds", type=float, default=RECOVERY_LEASE_SECONDS)
    p.add_argument(
        "--starts",
        choices=("together", "one-by-one"),
        default="together",
        help="how Ledgerflow's concurrent workloads issue their starts (DBOS's are one by one)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.role == "compare":
        os.environ[STARTS_ENV] = args.starts  # the role subprocesses inherit it
    if args.role == "ledgerflow":
        from compare_ledgerflow import run_role as run_ledgerflow

        return run_ledgerflow(args)
    if args.role == "dbos":
        # Imported only here: DBOS is a process-wide singleton, one per role process.
        from compare_dbos import run_role as run_dbos

        return run_dbos(args)
    print(json.dumps(run_compare(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
