"""Engine throughput and transactions per workflow, quickly, for profiling the hot path.

Not the comparison with DBOS (that is ``bench/compare.py``): this runs Ledgerflow alone, in one
process (engine and worker share the event loop, as an embedded user would run them), on a
fresh journal per workload, and prints workflows per second and the store's outermost
transactions per workflow (writes and reads, counted around the dialect's transaction hooks).

Workloads: ``steps3`` (3 trivial local steps) one after another (start, wait for the result,
next) and 1,000 started at once; ``effects3`` (3 effects through the full intent/outcome
protocol against an in-process participant that deduplicates by key) started at once; on
SQLite (WAL, synchronous=FULL) and, when reachable, PostgreSQL (synchronous_commit on).

    python bench/profile_engine.py                       # all workloads
    python bench/profile_engine.py --only sqlite-steps3-concurrent --profile
    python bench/profile_engine.py --instances 300 --sequential 200

``--profile`` runs each workload under cProfile and prints the top functions by own time and
by cumulative time to stderr. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import ledgerflow as lf
from ledgerflow import limits

PG_URL_DEFAULT = os.environ.get(
    "LEDGERFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
RESULT_TIMEOUT_SECONDS = 300.0

registry = lf.Registry()
desk = registry.add_participant(lf.Participant("desk", deduplicates=True))
APPLIED: dict[str, int] = {}


@desk.effect(classification="forward-recovery-only")
async def note(call: lf.EffectCall) -> dict[str, Any]:
    # Deduplicates by key, as the participant declares.
    entry = APPLIED.setdefault(call.idempotency_key, len(APPLIED) + 1)
    return {"entry": entry}


def add_one(n: int) -> int:
    return n + 1


@registry.workflow(name="steps3", version=1)
async def steps3(ctx: lf.WorkflowContext, n: int) -> int:
    a = await ctx.step("one", add_one, n)
    b = await ctx.step("two", add_one, a)
    return int(await ctx.step("three", add_one, b))


@registry.workflow(name="effects3", version=1)
async def effects3(ctx: lf.WorkflowContext, n: int) -> int:
    total = 0
    for i in range(3):
        got = await ctx.effect(note, {"n": n, "i": i})
        total += got["entry"]
    return total


class TransactionMeter:
    """Counts the store's outermost write and read transactions."""

    def __init__(self, store: Any) -> None:
        self.counts: Counter[str] = Counter()
        self._depth = 0
        store._write_transaction = self._wrap(store._write_transaction, "write")
        store._read = self._wrap(store._read, "read")

    def _wrap(self, inner: Any, kind: str) -> Any:
        @contextlib.contextmanager
        def measured() -> Iterator[None]:
            self._depth += 1
            try:
                with inner():
                    yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.counts[kind] += 1

        return measured


async def _sequential(engine: lf.Engine, workflow: str, n: int) -> None:
    for i in range(n):
        started = await engine.start(workflow, key=f"s{i}", input=i)
        await engine.result(started.instance_id, timeout=RESULT_TIMEOUT_SECONDS)


async def _concurrent(engine: lf.Engine, workflow: str, n: int) -> None:
    started = await asyncio.gather(
        *(engine.start(workflow, key=f"c{i}", input=i) for i in range(n))
    )
    await asyncio.gather(
        *(engine.result(s.instance_id, timeout=RESULT_TIMEOUT_SECONDS) for s in started)
    )


async def _measure(
    url: str, run: Callable[[lf.Engine], Awaitable[None]], n: int, concurrency: int
) -> dict[str, Any]:
    async with lf.Engine(url, registry) as engine:
        meter = TransactionMeter(engine.store)
        worker = engine.worker(concurrency=concurrency)
        task = asyncio.create_task(worker.run())
        before = Counter(meter.counts)
        t0 = time.perf_counter()
        await run(engine)
        seconds = time.perf_counter() - t0
        counts = meter.counts - before
        worker.stop()
        await task
        succeeded = engine.store.count_by_status().get(lf.InstanceStatus.SUCCEEDED, 0)
    return {
        "instances": n,
        "succeeded": succeeded,
        "seconds": round(seconds, 3),
        "wps": round(n / seconds, 1),
        "writes_per_workflow": round(counts["write"] / n, 2),
        "reads_per_workflow": round(counts["read"] / n, 2),
    }


def _pg_url(base: str, name: str) -> str | None:
    try:
        import psycopg
    except ImportError:
        return None
    schema = f"prof_{name.replace('-', '_')}_{os.getpid()}"
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    except psycopg.Error:
        return None
    return f"{base}?schema={schema}"


def _drop_pg(url: str) -> None:
    import psycopg

    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _workloads(args: argparse.Namespace) -> dict[str, tuple[str, str, str, int]]:
    """name -> (backend, workflow, mode, instances)."""
    return {
        "sqlite-steps3-sequential": ("sqlite", "steps3", "sequential", args.sequential),
        "sqlite-steps3-concurrent": ("sqlite", "steps3", "concurrent", args.instances),
        "sqlite-effects3-concurrent": ("sqlite", "effects3", "concurrent", args.instances),
        "postgres-steps3-sequential": ("postgres", "steps3", "sequential", args.sequential),
        "postgres-steps3-concurrent": ("postgres", "steps3", "concurrent", args.instances),
    }


def _profile_text(profile: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=limits.WORKER_CONCURRENCY_MAX)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--pg-url", default=PG_URL_DEFAULT)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=35)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    folder = tempfile.mkdtemp(prefix="lf-profile-")
    for name, (backend, workflow, mode, n) in _workloads(args).items():
        if args.only and name not in args.only:
            continue
        if backend == "sqlite":
            url: str | None = f"sqlite:///{folder}/{name}.db"
        else:
            url = _pg_url(args.pg_url, name)
            if url is None:
                print(f"{name}: PostgreSQL not reachable, skipped", file=sys.stderr)
                continue

        async def run(engine: lf.Engine, wf: str = workflow, m: str = mode, k: int = n) -> None:
            await (_sequential if m == "sequential" else _concurrent)(engine, wf, k)

        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        assert url is not None
        figures = asyncio.run(_measure(url, run, n, args.concurrency))
        if profile is not None:
            profile.disable()
            print(f"==== {name}\n{_profile_text(profile, args.top)}", file=sys.stderr)
        if backend == "postgres":
            _drop_pg(url)
        results[name] = figures
        print(f"{name}: {json.dumps(figures)}", file=sys.stderr, flush=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
