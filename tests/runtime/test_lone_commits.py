"""Where a commit is applied: alone on the loop's thread (SQLite), together on the store thread.

An embedded store applies a lone commit on the event loop's own thread when nothing else is
ready there and the store thread is idle (two thread wake-ups saved per commit, one after
another); commits of instances running at once must still share one transaction on the store
thread; PostgreSQL never blocks the loop on the network. The store's own ``commit`` is wrapped
to record which thread called it and with how many commits, and each run's results are checked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.ledger.records import Commit
from postgres_schema import postgres_url

registry = lf.Registry()


async def add(n: int) -> int:
    return n + 1


@registry.workflow(name="three", version=1)
async def three(ctx: lf.WorkflowContext, n: int) -> int:
    # Checkpoints: a commit per step, the commits whose threads and grouping are measured.
    a = await ctx.step("one", add, n, checkpoint=True)
    b = await ctx.step("two", add, a, checkpoint=True)
    return int(await ctx.step("three", add, b, checkpoint=True))


def _record_commits(engine: lf.Engine) -> list[tuple[bool, int]]:
    """(on the loop's thread, commits in the transaction) for every store commit."""
    seen: list[tuple[bool, int]] = []
    store: Any = engine.store
    inner = store.commit

    def commit(commits: Sequence[Commit], *, now: float) -> list[Exception | None]:
        seen.append((threading.current_thread() is threading.main_thread(), len(commits)))
        result: list[Exception | None] = inner(commits, now=now)
        return result

    store.commit = commit
    return seen


async def _one_after_another(url: str, n: int) -> list[tuple[bool, int]]:
    async with lf.Engine(url, registry) as engine:
        seen = _record_commits(engine)
        worker = engine.worker(concurrency=1)
        running = asyncio.create_task(worker.run())
        for i in range(n):
            started = await engine.start(three, key=f"s{i}", input=i)
            assert await engine.result(started.instance_id, timeout=30) == i + 3
        worker.stop()
        await running
    return seen


async def _at_once(url: str, n: int) -> list[tuple[bool, int]]:
    async with lf.Engine(url, registry) as engine:
        seen = _record_commits(engine)
        worker = engine.worker(concurrency=n)
        running = asyncio.create_task(worker.run())
        started = await asyncio.gather(
            *(engine.start(three, key=f"c{i}", input=i) for i in range(n))
        )
        results = await asyncio.gather(*(engine.result(s.instance_id, timeout=30) for s in started))
        assert results == [i + 3 for i in range(n)]
        worker.stop()
        await running
    return seen


def test_sqlite_lone_commits_run_on_the_loop_thread(tmp_path: Path) -> None:
    seen = asyncio.run(_one_after_another(f"sqlite:///{tmp_path}/j.db", 20))
    # 3 steps and the end per instance, each alone in its transaction.
    assert len(seen) == 20 * 4
    assert all(size == 1 for _, size in seen)
    on_loop = sum(1 for here, _ in seen if here)
    # A heartbeat or scan on the store thread may send the odd one there; nearly all stay.
    assert on_loop >= len(seen) * 0.9, seen


def test_sqlite_concurrent_commits_still_share_transactions(tmp_path: Path) -> None:
    n = 200
    seen = asyncio.run(_at_once(f"sqlite:///{tmp_path}/j.db", n))
    assert sum(size for _, size in seen) == n * 4
    shared = [size for here, size in seen if size > 1]
    assert shared, "no transaction held more than one commit"
    assert not any(here for here, size in seen if size > 1)
    # Far fewer transactions than commits: the point of group commit.
    assert len(seen) <= n * 4 / 5, len(seen)


def test_postgres_commits_never_run_on_the_loop_thread(request: pytest.FixtureRequest) -> None:
    url = postgres_url(request.node.name)
    seen = asyncio.run(_one_after_another(url, 5))
    assert len(seen) == 5 * 4
    assert not any(here for here, _ in seen)


def test_sqlite_lone_calls_still_let_timers_run(tmp_path: Path) -> None:
    """Starts one after another, each applied at once on the loop's thread, still yield the
    loop once per call: a timer due before the first start runs right after it, not after the
    fiftieth (a caller's loop of store calls must not keep timers and other tasks waiting)."""
    started: list[int] = []
    seen: list[int] = []

    async def run() -> None:
        async with lf.Engine(f"sqlite:///{tmp_path}/j.db", registry) as engine:
            asyncio.get_running_loop().call_later(0, lambda: seen.append(len(started)))
            for i in range(50):
                await engine.start(three, key=f"k{i}", input=i)
                started.append(i)

    asyncio.run(run())
    assert len(started) == 50
    assert len(seen) == 1
    assert seen[0] <= 1, f"the timer waited until start {seen[0]}"
