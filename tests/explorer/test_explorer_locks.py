"""The explorer on durable locks: two instances contending for one lock, a crash at every
fault point (the lock's own among them) and an event or a cancel request arriving at every
point never leave a lock held by an ended instance or an ended instance queued (the oracle's
lock checks); and with the release at the ending reverted, the explorer finds the lock a
cancelled holder kept.

Inside the block each instance holds a reservation and waits for a tick, so a sweep meets the
effect protocol, the lock's queue and a wait while holding it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.storage.sql_locks import LockStore
from ledgerflow.testing import Explorer, Summary, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


def _exclusive() -> lf.Registry:
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))

    @stock.effect(classification="reversible", compensation="release")
    async def reserve(call: lf.EffectCall) -> Any:
        return {}

    @stock.compensation("release")
    async def release(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="exclusive", version=1)
    async def exclusive(ctx: lf.WorkflowContext, who: str) -> str:
        async with ctx.lock("shelf:1"):
            await ctx.effect(reserve, {"who": who})
            await ctx.wait_for("tick")
        return who

    return registry


def _explorer(tmp_path: Path) -> Explorer:
    scenario = scenario_for(_exclusive(), "exclusive", ["a", "b"], signal="tick")
    return Explorer(scenario, folder=tmp_path)


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


def test_a_crash_at_every_point_of_two_contenders_leaves_no_lock_behind(
    tmp_path: Path,
) -> None:
    """Every fault point of the fault-free run (the release's among them), crashed at once:
    both instances succeed and the lock is free."""
    explorer = _explorer(tmp_path)

    async def explore() -> tuple[set[str], Summary]:
        baseline = (await explorer.paths())[0][1]
        return {h.split(" ", 2)[1] for h in baseline.hits}, await explorer.exhaustive(depth=1)

    points, summary = asyncio.run(explore())
    assert "lock.before_release" in points
    assert summary.failures == [], _violations(summary)
    assert summary.crashes >= len(points), summary.figures()
    assert set(summary.statuses) == {"SUCCEEDED"}, summary.figures()


def test_an_event_or_a_cancel_at_every_point_of_two_contenders(tmp_path: Path) -> None:
    """A tick or a cancel arriving at every fault point: a cancelled holder's ending hands the
    lock on, a cancelled waiter's leaves the queue."""
    summary = asyncio.run(_explorer(tmp_path).arrivals())
    assert summary.failures == [], _violations(summary)


def test_the_explorer_finds_the_kept_lock_with_the_release_at_the_ending_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: an ending left the instance's locks and queue places as they were (the lock of
    a holder cancelled inside its block never freed: Restate's key held for ever)."""
    monkeypatch.setattr(LockStore, "_end_locks", lambda self, instance_id, now: None)
    summary = asyncio.run(_explorer(tmp_path).arrivals())
    assert "lock-held-by-ended" in _found(summary), summary.figures()
