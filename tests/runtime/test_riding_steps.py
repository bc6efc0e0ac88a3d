"""A local step's result rides with the instance's next commit (issue 29, goal 3).

Local steps run at least once by contract; what rides is only when their result becomes
durable: with the next step's commit, an effect's intent, a wait or the ending, never later
than ``limits.RIDING_STEPS_MAX`` results or ``limits.RIDING_STEP_SECONDS_MAX`` after the
oldest. ``checkpoint=True`` keeps a step's own commit. Commits are counted at the store
(every transaction the engine asks of it); the kill tests SIGKILL a real worker process at
named points and read what ran from the steps' own side file and what was charged from the
participant's own book.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from riding_crash import build
from test_lone_commits import _record_commits

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.model.step import StepStatus
from ledgerflow.testing import FakeClock

PROCESS_SECONDS_MAX = 60.0
KEY = "r-1"


def _chain(steps: int, *, checkpoint: bool, clock: FakeClock | None = None) -> lf.Registry:
    registry = lf.Registry()

    def add_slowly(n: int) -> int:
        if clock is not None:
            clock.advance(0.5)  # the step's work takes 0.5 s of the engine's time
        return n + 1

    @registry.workflow(name="chain", version=1)
    async def chain(ctx: lf.WorkflowContext, n: int) -> int:
        for _ in range(steps):
            n = await ctx.step("add", add_slowly, n, checkpoint=checkpoint)
        return n

    return registry


async def _commits_of_one(
    url: str, registry: lf.Registry, key: str, clock: FakeClock | None = None
) -> int:
    """Commits the store made for one instance's run, start to end."""
    engine_of = lf.Engine(url, registry) if clock is None else lf.Engine(url, registry, clock=clock)
    async with engine_of as engine:
        seen = _record_commits(engine)
        started = await engine.start("chain", key=key, input=0)
        await engine.worker(poll_seconds=0.01).run(until_nothing_due=True)
        detail = await engine.detail(started.instance_id)
        assert detail.instance.status is lf.InstanceStatus.SUCCEEDED
        assert all(s.status is StepStatus.COMPLETED for s in detail.steps)
        return sum(count for _, count in seen)


@pytest.mark.parametrize("steps", [3, limits.RIDING_STEPS_MAX + 6])
def test_results_ride_the_next_commit_and_a_checkpoint_commits_alone(
    journal_url: str, steps: int
) -> None:
    """Goal: three steps and the ending are one commit, not four; past RIDING_STEPS_MAX
    results one more commit carries them; checkpoints commit every step on its own."""
    riding = asyncio.run(_commits_of_one(journal_url, _chain(steps, checkpoint=False), "c-1"))
    alone = asyncio.run(_commits_of_one(journal_url, _chain(steps, checkpoint=True), "c-2"))
    flushes = steps // (limits.RIDING_STEPS_MAX + 1)
    assert alone - riding == steps - flushes


def test_a_result_rides_no_longer_than_the_time_bound(journal_url: str) -> None:
    """Goal: steps of 0.5 s each (on the engine's clock): the third finds the oldest result
    riding for RIDING_STEP_SECONDS_MAX and commits the three; the last two ride to the end."""
    assert limits.RIDING_STEP_SECONDS_MAX == 1.0  # the arithmetic below counts on it
    clock = FakeClock()
    chain = _chain(5, checkpoint=False, clock=clock)
    riding = asyncio.run(_commits_of_one(journal_url, chain, "t-1", clock))
    clock = FakeClock()
    chain = _chain(5, checkpoint=True, clock=clock)
    alone = asyncio.run(_commits_of_one(journal_url, chain, "t-2", clock))
    # Steps 1 and 2 ride; step 3, computed 1 s after step 1, commits the three; steps 4 and 5
    # ride with the ending: five step commits become one.
    assert alone - riding == 4


# (point, fault match, checkpoint of the first step, how many times each step ran)
KILLS: list[tuple[str, dict[str, Any], bool, dict[str, int]]] = [
    ("step.after_execute", {"seq": 2}, False, {"first": 2, "second": 2, "third": 1}),
    ("step.after_execute", {"seq": 2}, True, {"first": 1, "second": 2, "third": 1}),
    ("effect.before_dispatch", {}, False, {"first": 1, "second": 1, "third": 1}),
    ("instance.before_finish", {}, False, {"first": 1, "second": 1, "third": 2}),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "match", "checkpoint", "runs"),
    KILLS,
    ids=["after-second-step", "after-second-step-checkpointed", "intent-durable", "before-end"],
)
def test_a_killed_worker_reruns_only_the_results_not_yet_durable(
    journal_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    point: str,
    match: dict[str, Any],
    checkpoint: bool,
    runs: dict[str, int],
) -> None:
    """Goal: SIGKILL before a riding result's commit runs that step again (at least once, as
    promised), never a step whose result was durable (a checkpoint, or one that rode an
    effect's intent); the journal holds each step once and the charge is applied once."""
    env = dict(os.environ)
    env["RIDING_RUNS"] = str(tmp_path / "runs")
    env["RIDING_APPLIED"] = str(tmp_path / "applied")
    rule = {"point": point, "action": "kill", "match": {"instance": KEY, **match}}
    env["LEDGERFLOW_FAULTS"] = json.dumps([rule])
    script = Path(__file__).parent / "riding_crash.py"
    process = subprocess.run(
        [sys.executable, str(script), journal_url, KEY, "1" if checkpoint else "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=PROCESS_SECONDS_MAX,
        check=False,
    )
    assert process.returncode == -9, "the worker was to die by SIGKILL at the point"
    for variable in ("RIDING_RUNS", "RIDING_APPLIED"):
        monkeypatch.setenv(variable, env[variable])  # the recovering worker runs here

    async def recover() -> lf.InstanceDetail:
        async with lf.Engine(journal_url, build(checkpoint)) as engine:
            await engine.worker(poll_seconds=0.02).run(until_idle=True)
            [instance] = await engine.list(limit=5)
            assert await engine.result(str(instance.instance_id), timeout=30) == 4
            return await engine.detail(str(instance.instance_id))

    detail = asyncio.run(recover())
    ran = (tmp_path / "runs").read_text().split()
    assert {name: ran.count(name) for name in runs} == runs
    assert [(s.name, s.status) for s in detail.steps if s.name in runs] == [
        (name, StepStatus.COMPLETED) for name in ("first", "second", "third")
    ]
    assert len((tmp_path / "applied").read_text().split()) == 1
