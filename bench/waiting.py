"""Waiting benchmark: a waiting instance is suspended (no lease, no coroutine in memory).

What it does, on a fresh SQLite journal with the default durable settings (WAL,
``synchronous=FULL``):

1. Starts a worker in a separate process (this same script, ``--role worker``) and, before
   any instance exists, reads its resident memory (the baseline).
2. Starts ``n`` instances of ``waiter`` (each one waits for the signal ``go``) from this
   process, one transaction per start, and measures the start rate.
3. Lets the worker run and measures the time until every instance is WAITING, then reads the
   worker's resident memory again. This is done twice, each time on a fresh journal with a
   fresh worker: for ``N // 10`` and for ``N``; a suspended instance holds no memory, so both
   figures should be about the same.
4. With the worker of the large run still running, delivers ``K`` signals one at a time and
   measures, for each, the time from the return of ``SyncEngine.signal`` to the instance's
   terminal write (its ``updated_at``), and to the moment this process sees it SUCCEEDED.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.

    python bench/waiting.py --quick
    python bench/waiting.py                       # 100,000 instances, 1,000 signals
    python bench/waiting.py --instances 20000 --signals 500 --poll-seconds 0.2

``--mode wakeups`` measures push wake-ups instead (see storage/wake_sources.py): on each
backend (SQLite, and PostgreSQL with ``--postgres URL``), with pushes on and off
(``LEDGERFLOW_PUSH_WAKEUPS``) and the worker's default poll, ``--instances`` parked
instances (default 300) and ``--signals`` signals (default 200) sent one at a time from this
process, signal to resumed as above; then, with the idle worker still listening, commits of due
work (starts of a workflow it does not serve) at ``--load-rate`` per second (default 5,000)
from ``--load-threads`` threads for ``--load-seconds``: the achieved rate, the commit latency
p50/p99, and the NOTIFYs this process sent per second (at most one per 2 ms window).

    python bench/waiting.py --mode wakeups --postgres postgresql://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.storage.wake_sources import ENABLED_VARIABLE

WORKFLOW = "waiter"
SIGNAL_NAME = "go"
CONCURRENCY_DEFAULT = 256
POLL_SECONDS_DEFAULT = 0.05
# How often this process looks at the journal while waiting for the worker.
PARK_POLL_SECONDS = 0.5
STATUS_POLL_SECONDS = 0.001
# Bounds: no phase of the benchmark may wait forever.
PARK_SECONDS_PER_INSTANCE_MAX = 0.05
PARK_SECONDS_MIN = 60.0
RESUME_SECONDS_MAX = 30.0
WORKER_READY_SECONDS_MAX = 60.0
WORKER_EXIT_SECONDS_MAX = 30.0
START_PROGRESS_EVERY = 5_000
SEED = 20240605


registry = lf.Registry()


@registry.workflow(name=WORKFLOW, version=1)
async def waiter(ctx: lf.WorkflowContext, n: int) -> Any:
    s = await ctx.wait_for(SIGNAL_NAME)
    return s.payload


def say(text: str) -> None:
    print(f"[waiting {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the worker process ------------------------------------------------------------------------


async def _work(url: str, concurrency: int, poll_seconds: float) -> None:
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(concurrency=concurrency, poll_seconds=poll_seconds)
        # Tell the benchmark we are set up (imports done, store open), then wait for its go:
        # the baseline memory is read in between, before any instance exists.
        print(f"ready {os.getpid()}", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()
        print(f"stopped driven={worker.driven}", file=sys.stderr, flush=True)


def run_worker(args: argparse.Namespace) -> int:
    asyncio.run(_work(args.db, args.concurrency, args.poll_seconds))
    return 0


# -- measuring a process -----------------------------------------------------------------------


def proc_memory_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak so far) of a process, in MiB."""
    found: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


def proc_cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def filesystem_of(path: str) -> str:
    """The type of the filesystem holding ``path`` (from /proc/mounts; "unknown" if unsure)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- the benchmark -----------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[str]
    pid: int

    @classmethod
    def spawn(cls, url: str, args: argparse.Namespace) -> WorkerProcess:
        """The worker, with this process's environment (LEDGERFLOW_PUSH_WAKEUPS included)."""
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
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert proc.stdout is not None
        deadline = time.monotonic() + WORKER_READY_SECONDS_MAX
        line = proc.stdout.readline()
        if not line.startswith("ready ") or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"worker did not get ready: {line!r}")
        return cls(proc=proc, pid=proc.pid)

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
            return self.proc.wait(timeout=WORKER_EXIT_SECONDS_MAX)
        except subprocess.TimeoutExpired:
            say(f"worker {self.pid} did not stop in {WORKER_EXIT_SECONDS_MAX}s; killing it")
            self.proc.kill()
            return self.proc.wait()


@dataclass
class Phase:
    """One fresh journal, one fresh worker, ``n`` parked instances."""

    n: int
    url: str
    worker: WorkerProcess
    engine: lf.SyncEngine
    ids: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def run_phase(folder: str, n: int, args: argparse.Namespace, label: str) -> Phase:
    path = os.path.join(folder, f"journal-{label}.db")
    # no "?synchronous=...": the default, durable FULL
    return run_phase_at(f"sqlite:///{path}", n, args, label)


def run_phase_at(url: str, n: int, args: argparse.Namespace, label: str) -> Phase:
    engine = lf.SyncEngine(url, registry)  # creates and migrates the journal
    worker = WorkerProcess.spawn(url, args)
    phase = Phase(n=n, url=url, worker=worker, engine=engine)
    time.sleep(0.5)  # let the worker's start-up allocations settle before reading them
    baseline = proc_memory_mb(worker.pid)
    say(f"[{label}] worker pid {worker.pid} ready, baseline {baseline}")

    t0 = time.perf_counter()
    for i in range(n):
        started = engine.start(WORKFLOW, key=f"{label}-{i}", input=i)
        phase.ids.append(started.instance_id)
        if (i + 1) % START_PROGRESS_EVERY == 0 or i + 1 == n:
            elapsed = time.perf_counter() - t0
            say(f"[{label}] started {i + 1}/{n} ({(i + 1) / elapsed:.0f}/s)")
    start_seconds = time.perf_counter() - t0

    worker.go()
    t0 = time.perf_counter()
    deadline = time.monotonic() + max(PARK_SECONDS_MIN, n * PARK_SECONDS_PER_INSTANCE_MAX)
    counts: dict[str, int] = {}
    parked = False
    last_said = 0.0
    while time.monotonic() < deadline and worker.alive():
        counts = {s.value: c for s, c in engine.store.count_by_status().items()}
        if counts.get("WAITING", 0) == n:
            parked = True
            break
        if time.perf_counter() - last_said >= 5:
            last_said = time.perf_counter()
            say(f"[{label}] parking: {counts}")
        time.sleep(PARK_POLL_SECONDS)
    park_seconds = time.perf_counter() - t0
    if not parked:
        say(f"[{label}] NOT all parked after {park_seconds:.1f}s: {counts}")
    # Every one suspended: no owner, no lease.
    leased = engine.store.list_instances(status=lf.InstanceStatus.WAITING, limit=n)
    held = sum(1 for r in leased if r.owner is not None or r.lease_expires_at is not None)
    time.sleep(1.0)  # the worker is idle now; let its memory settle before reading it
    at_n = proc_memory_mb(worker.pid)
    cpu0, w0 = proc_cpu_seconds(worker.pid), time.perf_counter()
    time.sleep(2.0)
    idle_cpu = (proc_cpu_seconds(worker.pid) - cpu0) / (time.perf_counter() - w0)
    say(
        f"[{label}] parked={parked} in {park_seconds:.1f}s, held={held}, rss {at_n}, "
        f"idle cpu {idle_cpu:.1%}"
    )
    phase.figures = {
        "instances": n,
        "start_seconds": round(start_seconds, 2),
        "start_per_second": round(n / start_seconds, 1),
        "all_parked": parked,
        "counts": counts,
        "waiting_with_owner_or_lease": held,
        "seconds_to_park_all": round(park_seconds, 2),
        "park_per_second": round(n / park_seconds, 1),
        "worker_rss_mb_baseline": baseline.get("VmRSS"),
        "worker_rss_mb_parked": at_n.get("VmRSS"),
        "worker_peak_rss_mb": at_n.get("VmHWM"),
        "worker_idle_cpu_fraction": round(idle_cpu, 4),
    }
    return phase


def measure_signals(phase: Phase, k: int, args: argparse.Namespace) -> dict[str, Any]:
    """K signals, one at a time, each to a different waiting instance; time to resumption."""
    rng = random.Random(SEED)
    targets = rng.sample(phase.ids, min(k, len(phase.ids)))
    to_write: list[float] = []
    to_seen: list[float] = []
    call_ms: list[float] = []
    timeouts = 0
    wrong = 0
    for i, instance_id in enumerate(targets):
        # A pause of random length, so signals land at every point of the worker's idle poll.
        time.sleep(args.pause_min + rng.random() * args.poll_seconds)
        before = time.time()
        delivered = phase.engine.signal(
            instance_id, SIGNAL_NAME, event_id=f"go-{i}", payload={"i": i}
        )
        sent = time.time()
        call_ms.append((sent - before) * 1000)
        if delivered.outcome is not lf.DeliveryOutcome.ACCEPTED:
            raise RuntimeError(f"signal {i} to {instance_id}: {delivered.outcome}")
        deadline = time.monotonic() + RESUME_SECONDS_MAX
        record = phase.engine.get(instance_id)
        while record.status is not lf.InstanceStatus.SUCCEEDED and time.monotonic() < deadline:
            time.sleep(STATUS_POLL_SECONDS)
            record = phase.engine.get(instance_id)
        seen = time.time()
        if record.status is not lf.InstanceStatus.SUCCEEDED:
            timeouts += 1
            say(f"signal {i}: {instance_id} still {record.status.value}")
            continue
        if json.loads(record.result or "null") != {"i": i}:
            wrong += 1
        to_write.append((record.updated_at - sent) * 1000)
        to_seen.append((seen - sent) * 1000)
        if (i + 1) % 100 == 0 or i + 1 == len(targets):
            say(
                f"signals {i + 1}/{len(targets)}: p50 {statistics.median(to_write):.1f} ms, "
                f"max {max(to_write):.1f} ms"
            )

    def summary(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"samples": 0}
        return {
            "p50": round(percentile(values, 50), 2),
            "p99": round(percentile(values, 99), 2),
            "max": round(max(values), 2),
            "min": round(min(values), 2),
            "samples": len(values),
        }

    return {
        "to_terminal_write": summary(to_write),
        "to_observed_succeeded": summary(to_seen),
        "signal_call": summary(call_ms),
        "timeouts": timeouts,
        "wrong_results": wrong,
    }


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    n = args.instances
    small_n = max(1, n // 10)
    k = args.signals
    wall0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ledgerflow-waiting-") as folder:
        fs = filesystem_of(os.path.realpath(folder))
        say(f"journal folder {folder} ({fs}); N={n}, N/10={small_n}, K={k}")
        small = run_phase(folder, small_n, args, "small")
        small.worker.stop()
        small.engine.close()

        big = run_phase(folder, n, args, "big")
        try:
            signals = measure_signals(big, k, args)
            after = proc_memory_mb(big.worker.pid)
        finally:
            code = big.worker.stop()
            big.engine.close()
        say(f"worker exit code {code}")
        journal_mb = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / (
            1024 * 1024
        )

    latency = signals["to_terminal_write"]
    return {
        "instances": n,
        "start_per_second": big.figures["start_per_second"],
        "seconds_to_park_all": big.figures["seconds_to_park_all"],
        "all_parked": big.figures["all_parked"] and small.figures["all_parked"],
        "worker_rss_mb": {
            "baseline": big.figures["worker_rss_mb_baseline"],
            "at_N": big.figures["worker_rss_mb_parked"],
            "at_N_div_10": small.figures["worker_rss_mb_parked"],
            "baseline_N_div_10_worker": small.figures["worker_rss_mb_baseline"],
            "peak_at_N": big.figures["worker_peak_rss_mb"],
            "peak_at_N_div_10": small.figures["worker_peak_rss_mb"],
            "after_signals": after.get("VmRSS"),
        },
        "signal_to_resume_ms": {
            "p50": latency.get("p50"),
            "p99": latency.get("p99"),
            "max": latency.get("max"),
            "samples": latency.get("samples"),
        },
        "signal_detail": signals,
        "phases": {"N": big.figures, "N_div_10": small.figures},
        "journal_files_mb": round(journal_mb, 1),
        "wall_seconds": round(time.perf_counter() - wall0, 1),
        "settings": {
            "store": "sqlite",
            "journal_filesystem": fs,
            "sqlite": "defaults: journal_mode=WAL, synchronous=FULL (durable)",
            "start": "SyncEngine.start, one transaction per start, sequential, one process",
            "worker_processes": 1,
            "concurrency": args.concurrency,
            "poll_seconds": args.poll_seconds,
            "lease_seconds": limits.LEASE_SECONDS_DEFAULT,
            "pause_between_signals_s": [args.pause_min, args.pause_min + args.poll_seconds],
            "latency": "terminal write updated_at minus signal return, same wall clock",
            "quick": args.quick,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
    }


# -- push wake-ups (--mode wakeups) -----------------------------------------------------------

load_registry = lf.Registry()


@load_registry.workflow(name="burst", version=1)
async def burst(ctx: lf.WorkflowContext, n: int) -> Any:
    return n  # never run here: the listening worker serves only "waiter"


def fresh_postgres(base: str, schema: str) -> str:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def measure_load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Starts (each one commit of due work) at a paced rate from several threads of one engine:
    commit latency, and how many NOTIFYs this process sent for them."""
    engine = lf.SyncEngine(url, load_registry)
    notifier = getattr(engine.store, "notifier", None)
    sent0 = notifier.sent if notifier is not None else 0
    latencies: list[list[float]] = [[] for _ in range(args.load_threads)]
    t0 = time.perf_counter() + 0.2
    total = int(args.load_rate * args.load_seconds)

    def run(j: int) -> None:
        for k in range(j, total, args.load_threads):
            at = t0 + k / args.load_rate
            wait = at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)  # open loop: the schedule, not the last answer, paces it
            before = time.perf_counter()
            engine.start("burst", key=f"load-{k}", input=k)
            latencies[j].append((time.perf_counter() - before) * 1000)

    threads = [threading.Thread(target=run, args=(j,)) for j in range(args.load_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    sent = (notifier.sent if notifier is not None else 0) - sent0
    engine.close()
    values = [v for per in latencies for v in per]
    return {
        "target_commits_per_second": args.load_rate,
        "commits": len(values),
        "commits_per_second": round(len(values) / elapsed, 1),
        "commit_ms_p50": round(percentile(values, 50), 2),
        "commit_ms_p99": round(percentile(values, 99), 2),
        "notifies_sent": sent,
        "notifies_per_second": round(sent / elapsed, 1),
        "notifies_per_second_max": round(1 / limits.WAKEUP_WINDOW_SECONDS, 1),
        "threads": args.load_threads,
        "seconds": round(elapsed, 2),
    }


def measure_push_delivery(url: str, k: int) -> dict[str, Any]:
    """From a ring of this process's notifier (a commit made work due) to a listener's wake,
    in this process: the push alone, without the claim and the resumption after it."""
    engine = lf.SyncEngine(url, registry)
    notifier = getattr(engine.store, "notifier", None)
    source = engine.store.wake_source() if hasattr(engine.store, "wake_source") else None
    if notifier is None or source is None:
        engine.close()
        return {"samples": 0}
    heard = threading.Event()
    if not source.start(heard.set, lambda _: None):
        engine.close()
        return {"samples": 0, "probe": "heard nothing"}
    values: list[float] = []
    for _ in range(k):
        heard.clear()
        time.sleep(limits.WAKEUP_WINDOW_SECONDS * 2)  # past the window: each ring is sent
        before = time.perf_counter()
        notifier.ring()
        if heard.wait(RESUME_SECONDS_MAX):
            values.append((time.perf_counter() - before) * 1000)
    source.close()
    engine.close()
    return {
        "p50": round(percentile(values, 50), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
        "samples": len(values),
    }


def run_wakeups(args: argparse.Namespace) -> dict[str, Any]:
    backends = [("sqlite", None)] + ([("postgres", args.postgres)] if args.postgres else [])
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ledgerflow-wakeups-") as folder:
        for backend, base in backends:
            for push in ("on", "off"):
                label = f"{backend}-{push}"
                # This process (the signals' and the load's sender) and the worker alike.
                os.environ[ENABLED_VARIABLE] = push
                if base is None:
                    url = f"sqlite:///{os.path.join(folder, f'journal-{label}.db')}"
                else:
                    url = fresh_postgres(base, f"bench_wakeups_{push}")
                phase = run_phase_at(url, args.instances, args, label)
                try:
                    signals = measure_signals(phase, args.signals, args)
                    say(f"[{label}] signal to resumed {signals['to_terminal_write']}")
                    load = measure_load(url, args) if args.load_seconds > 0 else {}
                    say(f"[{label}] load {load}")
                    pushed = (
                        measure_push_delivery(url, args.signals)
                        if base is not None and push == "on"
                        else {}
                    )
                    say(f"[{label}] ring to listener woken (ms) {pushed}")
                finally:
                    phase.worker.stop()
                    phase.engine.close()
                results[label] = {
                    "signal_to_resume_ms": signals["to_terminal_write"],
                    "signal_to_observed_ms": signals["to_observed_succeeded"],
                    "timeouts": signals["timeouts"],
                    "due_work_load": load,
                    "ring_to_listener_ms": pushed,
                }
    os.environ.pop(ENABLED_VARIABLE, None)
    return {
        "mode": "wakeups",
        "results": results,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "settings": {
            "poll_seconds": args.poll_seconds,
            "instances": args.instances,
            "signals": args.signals,
            "pause_between_signals_s": [args.pause_min, args.pause_min + args.poll_seconds],
            "wakeup_window_seconds": limits.WAKEUP_WINDOW_SECONDS,
            "sqlite_watch_seconds": limits.WAKEUP_WATCH_SECONDS,
            "latency": "terminal write updated_at minus signal return, same wall clock",
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--role", choices=("bench", "worker"), default="bench")
    p.add_argument("--mode", choices=("park", "wakeups"), default="park")
    p.add_argument("--postgres", help="PostgreSQL URL for --mode wakeups (a schema each run)")
    p.add_argument("--load-rate", type=float, default=5_000.0, help="commits/s of due work")
    p.add_argument("--load-threads", type=int, default=4)
    p.add_argument("--load-seconds", type=float, default=10.0)
    p.add_argument("--db", help="store URL (worker role)")
    p.add_argument("--instances", type=int, default=None, help="N (default 100000)")
    p.add_argument("--signals", type=int, default=None, help="K (default 1000)")
    p.add_argument("--quick", action="store_true", help="N=5000, K=200")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY_DEFAULT)
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=None,
        help=f"the worker's poll (default {POLL_SECONDS_DEFAULT}; wakeups: the worker's own, "
        f"{limits.POLL_SECONDS_DEFAULT})",
    )
    p.add_argument("--pause-min", type=float, default=0.005, help="least pause between signals")
    args = p.parse_args(argv)
    wakeups = args.mode == "wakeups"
    if args.poll_seconds is None:
        args.poll_seconds = limits.POLL_SECONDS_DEFAULT if wakeups else POLL_SECONDS_DEFAULT
    if args.instances is None:
        args.instances = 300 if wakeups else 5_000 if args.quick else 100_000
    if args.signals is None:
        args.signals = 200 if args.quick or wakeups else 1_000
    if args.instances < 1 or args.signals < 0:
        p.error("--instances must be at least 1 and --signals not negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.role == "worker":
        if not args.db:
            raise SystemExit("--role worker needs --db URL")
        return run_worker(args)
    result = run_wakeups(args) if args.mode == "wakeups" else run_benchmark(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
