"""Continue-as-new benchmark: a long loop's journal stays bounded, and its time linear.

Two loops, on a fresh journal each (SQLite by default, PostgreSQL with ``--postgres URL``):

1. ``steps``: 10,000 iterations of a local step, continuing as new every 100. Each iteration's
   step records when it ran; the figures are the time of the first 1,000 iterations and of the
   last 1,000 (linear time: about equal), the number of runs, and the largest journal any run
   holds (bounded: 100 steps) and the open run's journal a worker loads at the end.
2. ``suspending``: a loop whose every iteration sleeps durably (the instance is released and
   woken by its timer, on a fake clock, so each iteration is a claim and a replay of the open
   run's journal). Run twice: continuing every 100 iterations, and never continuing. Without
   continue-as-new every wake-up replays every earlier iteration (the time per iteration
   grows with the iteration number: quadratic in total); with it a wake-up replays at most 100.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.

    python bench/continue_as_new.py                        # 10,000 steps, 1,000 sleeps
    python bench/continue_as_new.py --quick                # 2,000 steps, 400 sleeps
    python bench/continue_as_new.py --postgres postgresql://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.testing import FakeClock

# When each step-loop iteration ran (perf_counter), by iteration number.
STEP_TIMES: dict[int, float] = {}
# When each suspending iteration was reached for the first time, by iteration number.
SLEEP_TIMES: dict[int, float] = {}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _tick(i: int) -> int:
    STEP_TIMES.setdefault(i, time.perf_counter())
    return i + 1


def _noted(i: int) -> int:
    SLEEP_TIMES.setdefault(i, time.perf_counter())
    return i


def registry() -> lf.Registry:
    reg = lf.Registry()

    @reg.workflow(name="steps", version=1)
    async def steps(ctx: lf.WorkflowContext, state: dict[str, Any]) -> int:
        i = state["i"]
        while i < state["until"]:
            i = await ctx.step("tick", _tick, i)
            if state["every"] and i % state["every"] == 0 and i < state["until"]:
                ctx.continue_as_new({**state, "i": i})
        return i

    @reg.workflow(name="suspending", version=1)
    async def suspending(ctx: lf.WorkflowContext, state: dict[str, Any]) -> int:
        i = state["i"]
        while i < state["until"]:
            await ctx.step("note", _noted, i)
            await ctx.sleep(60)
            i += 1
            if state["every"] and i % state["every"] == 0 and i < state["until"]:
                ctx.continue_as_new({**state, "i": i})
        return i

    return reg


def _url(postgres: str | None, folder: Path, name: str) -> str:
    if postgres is None:
        return f"sqlite:///{folder / name}.db"
    # A fresh schema per loop in the URL's database (the store creates it).
    import psycopg

    schema = f"lf_bench_can_{name}"
    with psycopg.connect(postgres, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    joiner = "&" if "?" in postgres else "?"
    return f"{postgres}{joiner}schema={schema}"


def _window(times: dict[int, float], first: range, last: range) -> dict[str, Any]:
    """The time of the first and of the last window of iterations: in total, and the median
    of one iteration (robust to another process's burst on a shared machine)."""

    def of(window: range) -> tuple[float, float]:
        gaps = [times[i + 1] - times[i] for i in window]
        return sum(gaps), statistics.median(gaps)

    (first_total, first_median), (last_total, last_median) = of(first), of(last)
    return {
        "window_iterations": len(first),
        "first_window_seconds": round(first_total, 4),
        "last_window_seconds": round(last_total, 4),
        "first_iteration_median_ms": round(first_median * 1000, 3),
        "last_iteration_median_ms": round(last_median * 1000, 3),
        "last_over_first_median": round(last_median / first_median, 3) if first_median else None,
    }


async def step_loop(url: str, *, iterations: int, every: int) -> dict[str, Any]:
    STEP_TIMES.clear()
    began = time.perf_counter()
    async with lf.Engine(url, registry()) as engine:
        started = await engine.start(
            "steps", key="steps", input={"i": 0, "until": iterations, "every": every}
        )
        await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)
        record = await engine.get(started.instance_id)
        runs = engine.store.runs(started.instance_id)
        loaded = engine.store.journal(started.instance_id, record.run)
    total = time.perf_counter() - began
    window = max(1, iterations // 10)
    # STEP_TIMES[i] is when iteration i began (0 .. iterations-1).
    timing = _window(STEP_TIMES, range(0, window), range(iterations - window - 1, iterations - 1))
    return {
        "iterations": iterations,
        "continue_every": every,
        "status": record.status.value,
        "result": record.result_value,
        "runs": record.run,
        "steps_per_closed_run_max": max((r.steps for r in runs), default=0),
        "open_run_journal_steps": len(loaded.steps),
        **timing,
        "total_seconds": round(total, 3),
    }


async def suspending_loop(url: str, *, iterations: int, every: int) -> dict[str, Any]:
    SLEEP_TIMES.clear()
    clock = FakeClock()
    began = time.perf_counter()
    async with lf.Engine(url, registry(), clock=clock) as engine:
        started = await engine.start(
            "suspending", key="suspending", input={"i": 0, "until": iterations, "every": every}
        )
        worker = engine.worker(lease_seconds=30, poll_seconds=3600)
        for _ in range(iterations + 1):
            await worker.run(until_nothing_due=True)
            record = await engine.get(started.instance_id)
            if record.status is not lf.InstanceStatus.WAITING:
                break
            clock.advance(61)
        record = await engine.get(started.instance_id)
    total = time.perf_counter() - began
    window = max(1, iterations // 10)
    timing = _window(SLEEP_TIMES, range(0, window), range(iterations - window - 1, iterations - 1))
    return {
        "iterations": iterations,
        "continue_every": every or None,
        "status": record.status.value,
        "runs": record.run,
        **timing,
        "total_seconds": round(total, 3),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="ledgerflow-bench-can-"))
    steps = args.steps or (2_000 if args.quick else 10_000)
    sleeps = args.sleeps or (400 if args.quick else 1_000)
    say(f"steps loop: {steps} iterations, continuing every {args.every}")
    step_figures = await step_loop(
        _url(args.postgres, folder, "steps"), iterations=steps, every=args.every
    )
    say(json.dumps(step_figures))
    suspending: dict[str, Any] = {}
    for label, every in (("continuing", args.every), ("never_continuing", 0)):
        say(f"suspending loop: {sleeps} iterations, {label}")
        suspending[label] = await suspending_loop(
            _url(args.postgres, folder, f"sleep_{label}"), iterations=sleeps, every=every
        )
        say(json.dumps(suspending[label]))
    return {
        "backend": "postgres" if args.postgres else "sqlite",
        "steps": step_figures,
        "suspending": suspending,
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 steps, 400 sleeps")
    parser.add_argument("--steps", type=int, default=0, help="iterations of the step loop")
    parser.add_argument("--sleeps", type=int, default=0, help="iterations of the sleep loop")
    parser.add_argument("--every", type=int, default=100, help="continue as new every N")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: SQLite)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(parse()))))
