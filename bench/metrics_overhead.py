"""What metrics cost: the comparison benchmark's Ledgerflow workloads, metrics on vs off.

    python bench/metrics_overhead.py --quick           # small sizes, SQLite, under a minute
    python bench/metrics_overhead.py                   # compare.py's sizes, 5 runs each
    python bench/metrics_overhead.py --postgres URL    # PostgreSQL too (a schema per run)

The workloads are ``bench/compare.py``'s (``steps3_sequential``, ``steps3_concurrent``,
``effects3_concurrent``: the same workflows, from ``compare_ledgerflow``), each run in its own
subprocess on a fresh store, metrics on and off interleaved (the order alternates from run to
run, so drift of a shared machine falls on both). "On" is an engine counting into its own
``prometheus_client`` registry, everything ``ledgerflow worker --metrics-port`` counts (the
journal's gauges included, read every second here rather than every 15 s, to make them show);
"off" is the default engine.

Two figures per workload, each the median over the runs of the on/off ratio within one run
(the pair ran back to back): the wall-clock overhead (workflows per second), and the CPU
overhead (CPU seconds of the whole process, every thread, per workflow). On a machine shared
with other work the wall clock moves by tens of percent from one run to the next whatever the
setting; the CPU the process itself spent is what metrics add to, and what decides
throughput where the engine is CPU-bound.

A third figure does not depend on the machine's other work: every call an engine with metrics
made during a run (``--micro``, ``steps3`` and ``effects3``, 1,000 at once) is recorded, then
replayed against a fresh registry in a tight loop; its time per workflow, against the CPU per
workflow of the same workloads with metrics off, is the instrumentation's own share.

Progress goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from compare_common import RUN_SECONDS_MAX, say
from compare_ledgerflow import CONCURRENCY_MAX, registry
from prometheus_client import CollectorRegistry

import ledgerflow as lf
from ledgerflow.runtime.metrics import Metrics

# name -> (workflow, one after another?)
WORKLOADS = {
    "steps3_sequential": ("steps3", True),
    "steps3_concurrent": ("steps3", False),
    "effects3_concurrent": ("effects3", False),
}
FULL = {"runs": 5, "sequential": 300, "concurrent": 1_000}
QUICK = {"runs": 3, "sequential": 30, "concurrent": 200}
SCHEMA_PREFIX = "bench_metrics"
SIGNALS_SECONDS = 1.0


async def _timed(
    db: str, workflow: str, sequential: bool, n: int, metrics_on: bool
) -> tuple[float, float]:
    metrics = Metrics(CollectorRegistry(), signals_seconds=SIGNALS_SECONDS) if metrics_on else None
    async with lf.Engine(db, registry, metrics=metrics) as engine:
        worker = engine.worker(concurrency=1 if sequential else min(n, CONCURRENCY_MAX))
        running = asyncio.create_task(worker.run())
        deadline = time.monotonic() + RUN_SECONDS_MAX
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        if sequential:
            for i in range(n):
                started = await engine.start(workflow, key=f"{workflow}-{i}", input=i)
                await engine.result(started.instance_id, timeout=RUN_SECONDS_MAX)
        else:
            await asyncio.gather(
                *(engine.start(workflow, key=f"{workflow}-{i}", input=i) for i in range(n))
            )
        while worker.driven < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {worker.driven} of {n} ended in time")
            await asyncio.sleep(0.001)
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        worker.stop()
        await running
        return seconds, cpu


# The instrumentation points the runtime calls on an engine's Metrics.
_POINTS = (
    "started",
    "committed",
    "settled",
    "dispatched",
    "claimed",
    "fenced",
    "lease_lost",
    "group_committed",
    "delivered",
)


class _Recording(Metrics):
    """Metrics that also keep every call made to them, to replay."""

    def __init__(self) -> None:
        super().__init__(CollectorRegistry(), signals_seconds=3600)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        for name in _POINTS:
            original = getattr(self, name)

            def recorded(*args: Any, _name: str = name, _f: Any = original, **kw: Any) -> Any:
                self.calls.append((_name, args, kw))
                return _f(*args, **kw)

            setattr(self, name, recorded)


async def _recorded_run(db: str, workflow: str, n: int) -> list[Any]:
    """Every instrumentation call of one run with metrics (1,000 at once)."""
    metrics = _Recording()
    async with lf.Engine(db, registry, metrics=metrics) as engine:
        worker = engine.worker(concurrency=min(n, CONCURRENCY_MAX))
        running = asyncio.create_task(worker.run())
        await asyncio.gather(*(engine.start(workflow, key=f"m-{i}", input=i) for i in range(n)))
        while worker.driven < n:
            await asyncio.sleep(0.001)
        worker.stop()
        await running
    return metrics.calls


def _micro(folder: Path, n: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for workflow in ("steps3", "effects3"):
        calls = asyncio.run(_recorded_run(f"sqlite:///{folder}/micro-{workflow}.db", workflow, n))
        replays = []
        for _ in range(7):
            fresh = Metrics(CollectorRegistry(), signals_seconds=3600)
            t0 = time.perf_counter()
            for name, args, kw in calls:
                getattr(fresh, name)(*args, **kw)
            replays.append(time.perf_counter() - t0)
        cpu_off = statistics.median(
            asyncio.run(
                _timed(f"sqlite:///{folder}/off-{workflow}-{r}.db", workflow, False, n, False)
            )[1]
            for r in range(3)
        )
        per_wf = statistics.median(replays) / n
        figures[workflow] = {
            "n": n,
            "calls_per_workflow": round(len(calls) / n, 1),
            "instrumentation_us_per_workflow": round(per_wf * 1e6, 1),
            "cpu_us_per_workflow_metrics_off": round(cpu_off / n * 1e6, 1),
            "instrumentation_share_percent": round(per_wf / (cpu_off / n) * 100, 1),
        }
        say(f"micro {workflow}: {figures[workflow]}")
    return figures


def _one_run(args: argparse.Namespace) -> int:
    workflow, sequential = WORKLOADS[args.workload]
    seconds, cpu = asyncio.run(_timed(args.db, workflow, sequential, args.n, args.metrics == "on"))
    print(json.dumps({"seconds": seconds, "wps": args.n / seconds, "cpu_per_wf": cpu / args.n}))
    return 0


def _store(backend: str, folder: Path, pg_url: str | None, label: str) -> tuple[str, Any]:
    """A fresh store's URL, and how to drop it afterwards."""
    if backend == "sqlite":
        path = folder / f"{label}.db"
        return f"sqlite:///{path}", lambda: [p.unlink(missing_ok=True) for p in folder.glob("*")]
    assert pg_url is not None
    schema = f"{SCHEMA_PREFIX}_{os.getpid()}_{label}"

    def drop() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    drop()
    joiner = "&" if "?" in pg_url else "?"
    return f"{pg_url}{joiner}schema={schema}", drop


def _measure(backend: str, workload: str, n: int, runs: int, pg_url: str | None) -> dict[str, Any]:
    runs_seen: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="lf-metrics-") as tmp:
        for run in range(runs):
            order = ("on", "off") if run % 2 == 0 else ("off", "on")
            for setting in order:
                db, drop = _store(backend, Path(tmp), pg_url, f"{workload}_{run}_{setting}")
                try:
                    command = [sys.executable, __file__, "--run", "--db", db]
                    command += ["--workload", workload, "--n", str(n), "--metrics", setting]
                    out = subprocess.run(
                        command, check=True, capture_output=True, text=True, timeout=RUN_SECONDS_MAX
                    )
                finally:
                    drop()
                runs_seen[setting].append(json.loads(out.stdout.strip().splitlines()[-1]))
    on, off = runs_seen["on"], runs_seen["off"]
    wall = statistics.median(b["wps"] / a["wps"] - 1 for a, b in zip(on, off, strict=True))
    cpu = statistics.median(
        a["cpu_per_wf"] / b["cpu_per_wf"] - 1 for a, b in zip(on, off, strict=True)
    )
    figures = {
        "n": n,
        "runs": runs,
        "wps_metrics_off": round(statistics.median(r["wps"] for r in off), 1),
        "wps_metrics_on": round(statistics.median(r["wps"] for r in on), 1),
        "wall_overhead_percent": round(wall * 100, 1),
        "cpu_ms_per_wf_off": round(statistics.median(r["cpu_per_wf"] for r in off) * 1000, 3),
        "cpu_ms_per_wf_on": round(statistics.median(r["cpu_per_wf"] for r in on) * 1000, 3),
        "cpu_overhead_percent": round(cpu * 100, 1),
    }
    say(f"{backend} {workload}: {figures}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgres", metavar="URL", help="also measure on this PostgreSQL")
    parser.add_argument("--micro", action="store_true", help="only the replayed-calls figure")
    parser.add_argument("--runs", type=int, help="pairs per workload (default: 5, --quick 3)")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--metrics", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        return _one_run(args)
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = {**sizes, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="lf-metrics-micro-") as tmp:
        micro = _micro(Path(tmp), sizes["concurrent"])
    if args.micro:
        print(json.dumps({"micro": micro}))
        return 0
    backends = ["sqlite"] + (["postgres"] if args.postgres else [])
    result: dict[str, Any] = {"micro": micro, "backends": {}}
    for backend in backends:
        result["backends"][backend] = {
            workload: _measure(
                backend,
                workload,
                sizes["sequential"] if sequential else sizes["concurrent"],
                sizes["runs"],
                args.postgres,
            )
            for workload, (_, sequential) in WORKLOADS.items()
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
