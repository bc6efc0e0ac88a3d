"""The explorer on effect heartbeats: a crash at every fault point of a workflow whose effects
beat (the heartbeat written at each dispatch among them), and random seeds whose participants
misbehave (answers held past the heartbeat timeout: an attempt cut off), break no invariant,
the oracle's heartbeat checks among them (``heartbeat-after-outcome``, ``dispatch-uncounted``);
and with the re-dispatch's attempt count broken, the explorer finds the uncounted dispatch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.participant import LookupAnswer
from ledgerflow.runtime.effects import EffectDriver
from ledgerflow.testing import Explorer, Summary, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


def _batch() -> lf.Registry:
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank"))

    @bank.effect(
        classification="compensatable",
        compensation="unsettle",
        timeout_seconds=30,
        heartbeat_timeout=5,
    )
    async def settle(call: lf.EffectCall) -> Any:
        return {}

    @bank.compensation("unsettle")
    async def unsettle(call: lf.EffectCall) -> Any:
        return {}

    @bank.lookup
    async def find(key: str, attempt: int) -> LookupAnswer:
        return LookupAnswer.not_applied()

    @bank.effect(classification="forward-recovery-only", heartbeat_timeout=5)
    async def notify(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="batch", version=1)
    async def batch(ctx: lf.WorkflowContext, n: int) -> Any:
        settled = await ctx.effect(settle, {"rows": n})
        await ctx.effect(notify, {"rows": n})
        return settled

    return registry


def _explorer(tmp_path: Path, inputs: list[int]) -> Explorer:
    return Explorer(scenario_for(_batch(), "batch", inputs), folder=tmp_path)


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


def test_a_crash_at_every_point_of_a_heartbeating_batch_is_clean(tmp_path: Path) -> None:
    """Every fault point of the fault-free run, the heartbeat's among them, crashed at once
    and during the recovery after it: every instance succeeds, nothing is violated."""
    explorer = _explorer(tmp_path, [1])

    async def explore() -> tuple[set[str], Summary]:
        baseline = (await explorer.paths())[0][1]
        return {h.split(" ", 2)[1] for h in baseline.hits}, await explorer.exhaustive(depth=2)

    points, summary = asyncio.run(explore())
    assert {"effect.before_heartbeat", "effect.after_heartbeat"} <= points
    assert summary.failures == [], _violations(summary)
    assert summary.crashes >= len(points), summary.figures()


def test_random_seeds_with_attempts_cut_off_are_clean(tmp_path: Path) -> None:
    """Seeds with crashes and misbehaving participants (an answer held past the deadline is
    past the heartbeat timeout first: the attempt is cut off and settled by lookup)."""
    summary = asyncio.run(_explorer(tmp_path, [1, 2, 3]).random(range(40)))
    assert summary.failures == [], _violations(summary)


def test_the_explorer_finds_a_redispatch_that_is_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broken on purpose: a re-dispatch keeps the attempt number it had (the class of bug in
    which a step cut off re-runs for ever without using its retry budget)."""
    original = EffectDriver._schedule_redispatch

    async def uncounted(self: EffectDriver, *, attempt: int, **rest: Any) -> Any:
        return await original(self, attempt=attempt - 1, **rest)  # sends `attempt` again

    monkeypatch.setattr(EffectDriver, "_schedule_redispatch", uncounted)
    summary = asyncio.run(_explorer(tmp_path, [1]).exhaustive(depth=1))
    found = {v.invariant for run in summary.failures for v in run.violations}
    assert "dispatch-uncounted" in found, summary.figures()
