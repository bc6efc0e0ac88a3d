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
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--metrics", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        return _one_run(args)
    sizes = QUICK if args.quick else FULL
    backends = ["sqlite"] + (["postgres"] if args.postgres else [])
    result: dict[str, Any] = {"prometheus_client": True, "backends": {}}
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
