"""The Ledgerflow side of ``bench/compare.py``: the workloads, run in a role subprocess.

Only the public API: ``lf.Registry``, ``lf.Participant``, ``lf.Engine``, ``engine.worker``.
One after another, each start is followed by ``Engine.result`` (a worker in the same process
wakes it when it lets the instance go; then it reads the instance once), as DBOS's
``start_workflow(...).get_result()``. Started at once, the ends are counted through
``Worker.driven`` (counted when the worker's task for an instance is done, i.e. after its
terminal commit), polled every millisecond: a thousand result reads would measure the reads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import time
from typing import Any

from compare_common import (
    DONE_POLL_SECONDS,
    RUN_SECONDS_MAX,
    STARTS_ENV,
    Desk,
    Marks,
    block_step2,
    ready_then_wait_go,
    report,
    say,
    tell,
    wait_exit,
)

import ledgerflow as lf
from ledgerflow import InstanceStatus

CONCURRENCY_MAX = 1_000  # the worker's own ceiling (ledgerflow.limits.WORKER_CONCURRENCY_MAX)

registry = lf.Registry()
desk = registry.add_participant(lf.Participant("desk", deduplicates=True))
DESK = Desk()
MARKS = Marks()


@desk.effect(classification="forward-recovery-only")
async def record(call: lf.EffectCall) -> dict[str, Any]:
    MARKS.step_ran(call.payload["n"])
    return DESK.apply(call.idempotency_key, call.payload)


# The steps are ``async def``: trivial code belongs on the loop, and a plain function would
# add a thread hop per step that the workload is not about.
async def one(n: int) -> int:
    MARKS.step_ran(n)
    return n + 1


async def two(n: int) -> int:
    MARKS.step_ran(n)
    if block_step2():
        MARKS.step2_reached()
        await asyncio.Event().wait()  # until SIGKILL
    return n + 2


async def three(n: int) -> int:
    MARKS.step_ran(n)
    return n + 3


@registry.workflow(name="steps3", version=1)
async def steps3(ctx: lf.WorkflowContext, n: int) -> int:
    a = await ctx.step("one", one, n)
    b = await ctx.step("two", two, n)
    c = await ctx.step("three", three, n)
    return int(a + b + c)


@registry.workflow(name="effects3", version=1)
async def effects3(ctx: lf.WorkflowContext, n: int) -> int:
    entries = 0
    for i in range(3):
        evidence = await ctx.effect(record, {"n": n, "i": i}, name=f"record{i}")
        entries += evidence["entry"]
    return entries


async def wait_driven(worker: lf.Worker, count: int, deadline: float) -> None:
    while worker.driven < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {worker.driven} of {count} instances ended in time")
        await asyncio.sleep(DONE_POLL_SECONDS)


async def succeeded(engine: lf.Engine) -> int:
    counts = await asyncio.to_thread(engine.store.count_by_status)
    return int(counts.get(InstanceStatus.SUCCEEDED, 0))


def durability_seen(engine: lf.Engine, args: argparse.Namespace) -> dict[str, str]:
    """What the store runs with, read back: the journal mode from the file itself (a property
    of the file) and the store's ``synchronous`` setting (per connection, so not visible from
    another one). PostgreSQL's synchronous_commit is the server's: Ledgerflow never sets it."""
    if args.backend != "sqlite":
        return {}
    with contextlib.closing(sqlite3.connect(args.path)) as conn:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    return {"journal_mode": mode, "synchronous": str(getattr(engine.store, "synchronous", "?"))}


async def start_marked(engine: lf.Engine, workload: str, i: int) -> None:
    MARKS.start_called(i)
    await engine.start(workload, key=f"{workload}-{i}", input=i)


async def run_timed(
    engine: lf.Engine, worker: lf.Worker, running: asyncio.Task[None], args: argparse.Namespace
) -> dict[str, Any]:
    n = args.n
    sequential = args.mode == "sequential"
    deadline = time.monotonic() + RUN_SECONDS_MAX
    t0 = time.perf_counter()
    # CPU time of this process (the engine, its store thread and the bench's own callers): a
    # figure a loaded machine disturbs far less than the wall clock, for timing two revisions.
    cpu0 = time.process_time()
    if sequential:
        # Start, then wait for the result, as DBOS's start_workflow(...).get_result() does.
        for i in range(n):
            MARKS.start_called(i)
            started = await engine.start(args.workload, key=f"{args.workload}-{i}", input=i)
            await engine.result(started.instance_id, timeout=RUN_SECONDS_MAX)
    else:
        # Started at once, as an asyncio caller would: the starts are in flight together, so
        # the engine may share their durable writes (DBOS's start_workflow returns after its
        # own write, one after another, which is the same "all started, then wait").
        if os.environ.get(STARTS_ENV) == "one-by-one":
            for i in range(n):
                await start_marked(engine, args.workload, i)
        else:
            await asyncio.gather(*(start_marked(engine, args.workload, i) for i in range(n)))
    await wait_driven(worker, n, deadline)
    seconds = time.perf_counter() - t0
    cpu_seconds = time.process_time() - cpu0
    worker.stop()
    await running
    return {
        "n": n,
        "seconds": round(seconds, 4),
        "wps": round(n / seconds, 2),
        "cpu_ms_per_workflow": round(cpu_seconds * 1000 / n, 3),
        "start_latency_ms": MARKS.start_latency_ms(),
        "succeeded": await succeeded(engine),
        "effect_calls": DESK.calls,
        "durability_seen": durability_seen(engine, args),
    }


async def run_recovery_load(engine: lf.Engine, args: argparse.Namespace) -> None:
    """Start n instances and let every one block in step 2; the orchestrator then SIGKILLs us."""
    MARKS.expected = args.n
    worker = engine.worker(
        concurrency=min(args.n, CONCURRENCY_MAX), lease_seconds=args.lease_seconds
    )
    running = asyncio.create_task(worker.run())
    for i in range(args.n):
        await engine.start(args.workload, key=f"recovery-{i}", input=i)
    deadline = time.monotonic() + RUN_SECONDS_MAX
    while not MARKS.all_reached.is_set():
        if time.monotonic() > deadline or running.done():
            raise RuntimeError(f"only {MARKS.reached_step2} instances reached step 2")
        await asyncio.sleep(DONE_POLL_SECONDS)
    tell("started")
    await asyncio.Event().wait()


async def run_recovery_finish(args: argparse.Namespace) -> None:
    """A fresh process: open the store, run a worker until every interrupted instance ended."""
    ready_then_wait_go()
    t0 = time.perf_counter()
    async with lf.Engine(args.db, registry) as engine:
        worker = engine.worker(concurrency=min(args.n, CONCURRENCY_MAX))
        running = asyncio.create_task(worker.run())
        await wait_driven(worker, args.n, time.monotonic() + RUN_SECONDS_MAX)
        seconds = time.perf_counter() - t0
        worker.stop()
        await running
        report(
            {
                "n": args.n,
                "seconds": round(seconds, 4),
                "wps": round(args.n / seconds, 2),
                "start_latency_ms": MARKS.start_latency_ms(since=t0),
                "succeeded": await succeeded(engine),
            }
        )
        await asyncio.to_thread(wait_exit)


async def main_async(args: argparse.Namespace) -> None:
    if args.mode == "recovery-finish":
        await run_recovery_finish(args)
        return
    async with lf.Engine(args.db, registry) as engine:
        if args.mode == "recovery-load":
            await asyncio.to_thread(ready_then_wait_go)
            await run_recovery_load(engine, args)
            return
        # The worker runs before the clock starts, as DBOS is launched before it: the timed
        # part is the workflows, not either engine's setting up.
        concurrency = 1 if args.mode == "sequential" else min(args.n, CONCURRENCY_MAX)
        worker = engine.worker(concurrency=concurrency)
        running = asyncio.create_task(worker.run())
        await asyncio.to_thread(ready_then_wait_go)
        figures = await run_timed(engine, worker, running, args)
        say(f"ledgerflow {args.workload} {args.mode}: {figures['wps']} wf/s")
        report(figures)
        await asyncio.to_thread(wait_exit)


def run_role(args: argparse.Namespace) -> int:
    asyncio.run(main_async(args))
    return 0
