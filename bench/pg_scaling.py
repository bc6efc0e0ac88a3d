"""Scaling benchmark: workflow throughput with 1, 2 and 4 worker processes (PostgreSQL; SQLite
with ``--backend sqlite``, to show why more processes do not pay there).

Two ways to run the W processes: by default W separate bench workers (below); with
``--supervisor``, one ``ledgerflow worker pg_scaling:registry --processes W``, the command a
user runs, whose figure is the one users get (the children print no figures of their own, so
commits and effect counts are absent from that mode's JSON; the clock starts when the first
child shows up in the worker registry, ``ready_skew_seconds`` says how late the last one was).

What it does, for each worker count W (1, 2, 4 by default), on a fresh PostgreSQL schema:

1. Starts ``n`` instances of ``pipeline`` (3 local steps and 2 effects against an in-process
   participant that deduplicates by idempotency key) from this process, one transaction per
   start, before any worker exists.
2. Spawns W workers as real subprocesses (this same script, ``--role worker``), waits until
   every one has opened the store, then lets them all go at once.
3. Measures the time from the go until ``count_by_status`` says all ``n`` are SUCCEEDED
   (polled, bounded): workflows per second. Meanwhile it samples what the workers' database
   sessions are doing (``pg_stat_activity``, filtered by the workers' ``application_name``)
   and the machine's CPU use (``/proc/stat``).
4. Stops the workers (SIGTERM); each prints its own figures: transactions it ran (writes and
   reads, counted around the store's outermost transactions), the time its one store thread
   spent in them, its CPU time and the participant's applications.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.

    python bench/pg_scaling.py --quick                  # 300 instances per worker count
    python bench/pg_scaling.py                          # 2,000 instances per worker count
    python bench/pg_scaling.py --workers 1 2 4 8 --instances 5000 --concurrency 128
    python bench/pg_scaling.py --supervisor --workers 1 2       # ledgerflow worker --processes
    python bench/pg_scaling.py --backend sqlite --supervisor --workers 1 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from scaling_measures import ActivitySampler, machine_cpu, postgres_cpu, proc_cpu_seconds

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.errors import StorageUnavailableError

WORKFLOW = "pipeline"
WORKLOAD = "3 local steps + 2 effects"
BASE_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
SCHEMA_PREFIX = "bench_pg_scaling"
WORKERS_DEFAULT = (1, 2, 4)
INSTANCES_DEFAULT = 2_000
INSTANCES_QUICK = 300
CONCURRENCY_DEFAULT = limits.WORKER_CONCURRENCY_DEFAULT
POLL_SECONDS_DEFAULT = 0.05
# How often this process looks at the journal (the sessions: scaling_measures).
STATUS_POLL_SECONDS = 0.05
# The JSON keeps the count of SUCCEEDED instances at this interval, to show the shape of a run.
TIMELINE_EVERY_SECONDS = 0.5
# Bounds: no phase of the benchmark may wait forever.
RUN_SECONDS_PER_INSTANCE_MAX = 0.2
RUN_SECONDS_MIN = 120.0
WORKER_READY_SECONDS_MAX = 60.0
WORKER_EXIT_SECONDS_MAX = 30.0
START_PROGRESS_EVERY = 500
START_RETRY_SECONDS_MAX = 60.0
START_RETRY_PAUSE_SECONDS = 0.5
APP_NAME_PREFIX = "lf-bench-worker"
# The ``ledgerflow`` command run by this interpreter (the --supervisor mode).
LEDGERFLOW = [sys.executable, "-c", "from ledgerflow.cli.main import main; main()"]
HERE = Path(__file__).resolve().parent
# How recently a worker must have beaten to count as up (the supervisor mode's start).
LIVE_SECONDS = 30.0


# -- the workload (imported by the worker processes too) ---------------------------------------

registry = lf.Registry()
ledger = registry.add_participant(lf.Participant("ledger", deduplicates=True))


class Desk:
    """The participant's own books, in the worker's memory: one application per key."""

    def __init__(self) -> None:
        self.evidence: dict[str, dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()

    def apply(self, call: lf.EffectCall, what: str) -> dict[str, Any]:
        key = call.idempotency_key
        self.calls[key] += 1
        found = self.evidence.get(key)
        if found is None:
            found = {"what": what, "entry": len(self.evidence) + 1, "payload": call.payload}
            self.evidence[key] = found
        return found


DESK = Desk()


@ledger.effect(classification="forward-recovery-only")
async def reserve(call: lf.EffectCall) -> dict[str, Any]:
    return DESK.apply(call, "reserve")


@ledger.effect(classification="forward-recovery-only")
async def post(call: lf.EffectCall) -> dict[str, Any]:
    return DESK.apply(call, "post")


def validate(n: int) -> dict[str, Any]:
    return {"n": n, "valid": n >= 0}


def price(order: dict[str, Any]) -> int:
    return 100 + order["n"] % 50


def summarise(order: dict[str, Any], amount: int, reserved: dict[str, Any]) -> dict[str, Any]:
    return {"n": order["n"], "amount": amount, "entry": reserved["entry"]}


@registry.workflow(name=WORKFLOW, version=1)
async def pipeline(ctx: lf.WorkflowContext, n: int) -> Any:
    order = await ctx.step("validate", validate, n)
    amount = await ctx.step("price", price, order)
    reserved = await ctx.effect(reserve, {"n": n, "amount": amount})
    summary = await ctx.step("summarise", summarise, order, amount, reserved)
    posted = await ctx.effect(post, summary)
    return {"summary": summary, "posted": posted["entry"]}


def say(text: str) -> None:
    print(f"[pg_scaling {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the worker process ------------------------------------------------------------------------


class TransactionMeter:
    """Counts the store's outermost transactions and the time spent in them (one thread)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.counts: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        store._write_transaction = self._wrap(store._write_transaction, "write")
        store._read = self._wrap(store._read, "read")

    def _wrap(self, inner: Any, kind: str) -> Any:
        @contextlib.contextmanager
        def measured() -> Iterator[None]:
            if getattr(self.store._local, "conn", None) is not None:
                with inner():  # nested in a transaction already counted
                    yield
                return
            t0 = time.perf_counter()
            try:
                with inner():
                    yield
            finally:
                self.counts[kind] += 1
                self.seconds[kind] += time.perf_counter() - t0

        return measured


async def _work(args: argparse.Namespace) -> None:
    async with lf.Engine(args.db, registry) as engine:
        meter = TransactionMeter(engine.store)
        worker = engine.worker(concurrency=args.concurrency, poll_seconds=args.poll_seconds)
        print(f"ready {os.getpid()}", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        t0 = time.perf_counter()
        await worker.run()
        wall = time.perf_counter() - t0
        stats = {
            "pid": os.getpid(),
            "driven": worker.driven,
            "wall_seconds": round(wall, 3),
            "transactions": dict(meter.counts),
            "transaction_seconds": {k: round(v, 3) for k, v in meter.seconds.items()},
            "effect_keys": len(DESK.evidence),
            "effect_calls": sum(DESK.calls.values()),
            "effect_keys_called_twice": sum(1 for c in DESK.calls.values() if c > 1),
        }
        print(f"stats {json.dumps(stats)}", flush=True)


def run_worker(args: argparse.Namespace) -> int:
    asyncio.run(_work(args))
    return 0


# -- the benchmark -----------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[str]
    pid: int
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def spawn(cls, url: str, app_name: str, args: argparse.Namespace) -> WorkerProcess:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--role",
            "worker",
            "--db",
            url,
            "--concurrency",
            str(args.concurrency),
            "--poll-seconds",
            str(args.poll_seconds),
        ]
        env = dict(os.environ, PGAPPNAME=app_name)  # libpq names the workers' sessions
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env
        )
        return cls(proc=proc, pid=proc.pid)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.proc.kill()
            raise RuntimeError(f"worker {self.pid} did not get ready: {line!r}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=WORKER_EXIT_SECONDS_MAX)
        except subprocess.TimeoutExpired:
            say(f"worker {self.pid} did not stop in {WORKER_EXIT_SECONDS_MAX}s; killing it")
            self.proc.kill()
            out, _ = self.proc.communicate()
        for line in (out or "").splitlines():
            if line.startswith("stats "):
                self.stats = json.loads(line[len("stats ") :])
        return self.proc.returncode


class Supervised:
    """``ledgerflow worker pg_scaling:registry --processes W``: the command a user runs. It
    has no ready/go handshake: its children claim as soon as they are up."""

    def __init__(self, url: str, app_name: str, workers: int, args: argparse.Namespace) -> None:
        command = [*LEDGERFLOW, "worker", "pg_scaling:registry", "--db", url]
        command += ["--processes", str(workers), "--concurrency", str(args.concurrency)]
        command += ["--poll-seconds", str(args.poll_seconds)]
        env = dict(os.environ, PGAPPNAME=app_name)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
        self.log = Path(args.folder) / f"supervisor-w{workers}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(command, env=env, stdout=out, stderr=out)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def children(self) -> list[int]:
        """The worker processes' pids now: the supervisor's children (Linux's /proc list), or
        the command itself, which with ``--processes 1`` is the worker."""
        path = f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"
        try:
            with open(path, encoding="ascii") as f:
                return [int(pid) for pid in f.read().split()] or [self.proc.pid]
        except OSError:
            return [self.proc.pid]

    def stop(self) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=WORKER_EXIT_SECONDS_MAX)
        except subprocess.TimeoutExpired:
            say(f"supervisor {self.proc.pid} did not stop in {WORKER_EXIT_SECONDS_MAX}s")
            self.proc.kill()
            self.proc.wait()
        if self.proc.returncode != 0:
            say(self.log.read_text(errors="replace")[-3000:])
        return self.proc.returncode


def wait_live(engine: lf.SyncEngine, workers: int, alive: Any) -> tuple[float, float]:
    """Wait (bounded) until ``workers`` workers are in the registry: when the first and the
    last one were seen (perf_counter), polled every STATUS_POLL_SECONDS."""
    deadline = time.monotonic() + WORKER_READY_SECONDS_MAX
    first: float | None = None
    while time.monotonic() < deadline and alive():
        live = len(engine.store.workers(live_since=time.time() - LIVE_SECONDS))
        if live and first is None:
            first = time.perf_counter()
        if live >= workers and first is not None:
            return first, time.perf_counter()
        time.sleep(STATUS_POLL_SECONDS)
    raise RuntimeError(f"{workers} worker processes did not show up in the registry in time")


def fresh_store(args: argparse.Namespace, label: str) -> tuple[str, str]:
    """A fresh journal for one run: its URL, and what names it (a schema or a file)."""
    if args.backend == "sqlite":
        path = os.path.join(args.folder, f"{label}.db")
        return f"sqlite:///{path}", path
    schema = f"{SCHEMA_PREFIX}_{os.getpid()}_{label}"
    return fresh_schema(args.base_url, schema), schema


def drop_store(args: argparse.Namespace, name: str) -> None:
    if args.backend == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(name + suffix)
    else:
        drop_schema(args.base_url, name)


def fresh_schema(base_url: str, schema: str) -> str:
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return f"{base_url}?schema={schema}"


def drop_schema(base_url: str, schema: str) -> None:
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def start_with_retry(engine: lf.SyncEngine, *, key: str, n: int) -> None:
    """Start one instance; a start is idempotent by key, so a dropped connection is retried
    (bounded), e.g. while someone restarts a shared server."""
    deadline = time.monotonic() + START_RETRY_SECONDS_MAX
    while True:
        try:
            engine.start(WORKFLOW, key=key, input=n)
            return
        except StorageUnavailableError as exc:
            if time.monotonic() > deadline:
                raise
            say(f"start {key}: {exc}; retrying")
            time.sleep(START_RETRY_PAUSE_SECONDS)


def run_one(workers: int, args: argparse.Namespace) -> dict[str, Any]:
    n = args.instances
    label = f"w{workers}"
    app_name = f"{APP_NAME_PREFIX}-{os.getpid()}-w{workers}"
    url, name = fresh_store(args, label)
    engine = lf.SyncEngine(url, registry)  # creates and migrates the journal
    postgres = args.backend == "postgres"
    ready_skew = 0.0
    try:
        t0 = time.perf_counter()
        for i in range(n):
            start_with_retry(engine, key=f"{label}-{i}", n=i)
            if (i + 1) % START_PROGRESS_EVERY == 0 or i + 1 == n:
                elapsed = time.perf_counter() - t0
                say(f"[{label}] started {i + 1}/{n} ({(i + 1) / elapsed:.0f}/s)")
        start_seconds = time.perf_counter() - t0

        supervised = Supervised(url, app_name, workers, args) if args.supervisor else None
        procs = (
            [] if supervised else [WorkerProcess.spawn(url, app_name, args) for _ in range(workers)]
        )
        try:
            if supervised is not None:
                t0, last = wait_live(engine, workers, supervised.alive)
                ready_skew = last - t0
                pids = supervised.children()
                alive = supervised.alive
            else:
                ready_by = time.monotonic() + WORKER_READY_SECONDS_MAX
                for p in procs:
                    p.wait_ready()
                if time.monotonic() > ready_by:
                    raise RuntimeError("workers took too long to get ready")
                pids = [p.pid for p in procs]
                alive = lambda: all(p.alive() for p in procs)  # noqa: E731
            sampler = ActivitySampler(args.base_url, app_name) if postgres else None
            if sampler is not None:
                sampler.start()
            cpu0 = {pid: proc_cpu_seconds(pid) for pid in pids}
            busy0, total0 = machine_cpu()
            pg0 = postgres_cpu() if postgres else {}
            for p in procs:
                p.go()
            if supervised is None:
                t0 = time.perf_counter()
            deadline = time.monotonic() + max(RUN_SECONDS_MIN, n * RUN_SECONDS_PER_INSTANCE_MAX)
            counts: dict[str, int] = {}
            done = False
            last_said = time.perf_counter()
            timeline: list[list[float]] = []
            next_mark = 0.0
            while time.monotonic() < deadline and alive():
                counts = {s.value: c for s, c in engine.store.count_by_status().items()}
                if time.perf_counter() - t0 >= next_mark:
                    timeline.append([round(next_mark, 1), counts.get("SUCCEEDED", 0)])
                    next_mark += TIMELINE_EVERY_SECONDS
                if counts.get("SUCCEEDED", 0) == n:
                    done = True
                    break
                if time.perf_counter() - last_said >= 5:
                    last_said = time.perf_counter()
                    say(f"[{label}] running: {counts}")
                time.sleep(STATUS_POLL_SECONDS)
            seconds = time.perf_counter() - t0
            busy1, total1 = machine_cpu()
            pg1 = postgres_cpu() if postgres else {}
            cpu = {}
            for pid in pids:
                with contextlib.suppress(OSError):
                    cpu[pid] = proc_cpu_seconds(pid) - cpu0[pid]
            activity = sampler.stop() if sampler is not None else None
        finally:
            codes = [supervised.stop()] if supervised else [p.stop() for p in procs]
        if not done:
            say(f"[{label}] NOT all succeeded after {seconds:.1f}s: {counts}")
    finally:
        engine.close()
        if not args.keep_schemas:
            drop_store(args, name)

    stats = [p.stats for p in procs]
    writes = sum(s.get("transactions", {}).get("write", 0) for s in stats)
    reads = sum(s.get("transactions", {}).get("read", 0) for s in stats)
    write_s = sum(s.get("transaction_seconds", {}).get("write", 0.0) for s in stats)
    read_s = sum(s.get("transaction_seconds", {}).get("read", 0.0) for s in stats)
    store_busy = [round(sum(s.get("transaction_seconds", {}).values()) / seconds, 3) for s in stats]
    result: dict[str, Any] = {
        "workers": workers,
        "seconds": round(seconds, 3),
        "workflows_per_second": round(n / seconds, 1),
        "all_succeeded": done,
        "counts": counts,
        "start_per_second": round(n / start_seconds, 1),
        "worker_cpu_fraction": [round(c / seconds, 3) for c in cpu.values()],
        "machine_cpu_busy_fraction": round((busy1 - busy0) / max(1, total1 - total0), 3),
        "machine_cpu_busy_cores": round(
            (os.cpu_count() or 1) * (busy1 - busy0) / max(1, total1 - total0), 2
        ),
        "worker_exit_codes": codes,
        "succeeded_timeline": timeline,
    }
    if postgres:
        result["postgres_cpu_fraction"] = round(
            sum(c - pg0.get(pid, 0.0) for pid, c in pg1.items()) / seconds, 3
        )
        result["pg_sessions"] = activity
    if supervised is not None:
        result["ready_skew_seconds"] = round(ready_skew, 3)
    else:
        result.update(
            {
                "commits": writes,
                "commits_per_workflow": round(writes / n, 2),
                "commits_per_second": round(writes / seconds, 1),
                "read_transactions": reads,
                "mean_commit_ms": round(1000 * write_s / writes, 3) if writes else None,
                "mean_read_ms": round(1000 * read_s / reads, 3) if reads else None,
                "store_thread_busy_fraction": store_busy,
                "driven": [s.get("driven") for s in stats],
                "effect_keys": sum(s.get("effect_keys", 0) for s in stats),
                "effect_keys_called_twice": sum(
                    s.get("effect_keys_called_twice", 0) for s in stats
                ),
            }
        )
    say(
        f"[{label}] {n} in {seconds:.2f}s = {n / seconds:.1f} wf/s; worker cpu "
        f"{result['worker_cpu_fraction']}, postgres cpu {result.get('postgres_cpu_fraction')}, "
        f"machine cpu {result['machine_cpu_busy_fraction']}"
    )
    return result


def server_settings(base_url: str) -> dict[str, Any]:
    names = ("server_version", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay")
    found: dict[str, Any] = {}
    with psycopg.connect(base_url, autocommit=True) as conn:
        for name in names:
            found[name] = conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
    return found


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    wall0 = time.perf_counter()
    server = server_settings(args.base_url) if args.backend == "postgres" else {}
    say(f"{args.backend} {server}; N={args.instances}, workers {args.workers}")
    with tempfile.TemporaryDirectory(prefix="lf-scaling-") as folder:
        args.folder = folder
        results = {str(w): run_one(w, args) for w in args.workers}
    first = results[str(args.workers[0])]["workflows_per_second"]
    return {
        "backend": args.backend,
        "launch": "ledgerflow worker --processes W" if args.supervisor else "W bench workers",
        "workload": WORKLOAD,
        "instances": args.instances,
        "results": results,
        "speedup": {k: round(v["workflows_per_second"] / first, 2) for k, v in results.items()},
        "wall_seconds": round(time.perf_counter() - wall0, 1),
        "settings": {
            "server": server,
            "url": (
                f"{args.base_url}?schema={SCHEMA_PREFIX}_<pid>_w<workers> (fresh per run)"
                if args.backend == "postgres"
                else "sqlite:///<temporary folder>/w<workers>.db (fresh per run)"
            ),
            "start": "SyncEngine.start, one transaction per start, sequential, before workers",
            "measured": ("first worker in the registry" if args.supervisor else "first go")
            + f" to all SUCCEEDED by count_by_status (polled every {STATUS_POLL_SECONDS}s)",
            "concurrency_per_worker": args.concurrency,
            "poll_seconds": args.poll_seconds,
            "lease_seconds": limits.LEASE_SECONDS_DEFAULT,
            "claim_batch_max": limits.CLAIM_BATCH_MAX,
            "participant": "in-process, deduplicates by idempotency key",
            "commits": "the workers' outermost write transactions (reads counted apart)",
            "quick": args.quick,
            "loadavg": list(os.getloadavg()),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--role", choices=("bench", "worker"), default="bench")
    p.add_argument("--db", help="store URL (worker role)")
    p.add_argument(
        "--base-url",
        default=os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL", BASE_URL_DEFAULT),
        help="PostgreSQL URL without ?schema (default $LEDGERFLOW_TEST_POSTGRES_URL or "
        f"{BASE_URL_DEFAULT})",
    )
    p.add_argument("--instances", type=int, default=None, help=f"N (default {INSTANCES_DEFAULT})")
    p.add_argument("--quick", action="store_true", help=f"N={INSTANCES_QUICK}")
    p.add_argument("--workers", type=int, nargs="+", default=list(WORKERS_DEFAULT))
    p.add_argument(
        "--supervisor",
        action="store_true",
        help="run the W processes as one `ledgerflow worker --processes W` (what users run)",
    )
    p.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY_DEFAULT)
    p.add_argument("--poll-seconds", type=float, default=POLL_SECONDS_DEFAULT)
    p.add_argument("--keep-schemas", action="store_true", help="do not drop the schemas after")
    args = p.parse_args(argv)
    if args.instances is None:
        args.instances = INSTANCES_QUICK if args.quick else INSTANCES_DEFAULT
    if args.instances < 1 or any(w < 1 for w in args.workers):
        p.error("--instances and --workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.role == "worker":
        if not args.db:
            raise SystemExit("--role worker needs --db URL")
        return run_worker(args)
    result = run_benchmark(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
