"""The explorer on continue-as-new: a crash at every fault point of a chain of three runs
(around each switch too) and an event or a cancel request arriving at every point never leave
two runs open, lose an event on a closed run or hand one event to two waits; and with the
switch's move of the inbox reverted, the explorer finds the lost event.

The workflow holds a reservation per run and waits for two ticks per run, so a crash sweep
meets the effect protocol, the waits and the switch; a failure in a later run compensates the
reservations of every run (the refusal sweep).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.testing import Explorer, Summary, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]

INVARIANTS = {
    "one-open-run",
    "no-event-lost-across-a-switch",
    "no-event-duplicated-across-a-switch",
}


def _tally() -> lf.Registry:
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))

    @stock.effect(classification="reversible", compensation="release")
    async def reserve(call: lf.EffectCall) -> Any:
        return {}

    @stock.compensation("release")
    async def release(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="tally", version=1)
    async def tally(ctx: lf.WorkflowContext, seen: list[Any]) -> list[Any]:
        await ctx.effect(reserve, {"run": ctx.run})
        for _ in range(2):
            tick = await ctx.wait_for("tick")
            seen = [*seen, tick.event_id]
        if ctx.run < 3:
            ctx.continue_as_new(seen)
        return seen

    return registry


def _explorer(tmp_path: Path) -> Explorer:
    return Explorer(scenario_for(_tally(), "tally", [[]], signal="tick"), folder=tmp_path)


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


def test_a_crash_at_every_point_of_the_chain_leaves_one_run_and_every_event(
    tmp_path: Path,
) -> None:
    """Every fault point of the fault-free chain (the switch's own among them), crashed at
    once: each run recovers to one open run, every tick taken once."""
    explorer = _explorer(tmp_path)

    async def explore() -> tuple[set[str], Summary]:
        baseline = (await explorer.paths())[0][1]
        return {h.split(" ", 2)[1] for h in baseline.hits}, await explorer.exhaustive(depth=1)

    points, summary = asyncio.run(explore())
    assert {"run.before_switch", "run.after_switch"} <= points
    assert summary.failures == [], _violations(summary)
    assert summary.crashes >= len(points), summary.figures()
    assert set(summary.statuses) == {"SUCCEEDED"}, summary.figures()


def test_an_event_or_a_cancel_at_every_point_of_the_chain(tmp_path: Path) -> None:
    """A tick or a cancel request arriving at every fault point, the switch's included: a tick
    that arrives while run N closes is taken by run N+1, a cancel releases every run's
    reservation."""
    summary = asyncio.run(_explorer(tmp_path).arrivals())
    assert summary.failures == [], _violations(summary)


def test_a_refusal_in_a_later_run_compensates_every_run(tmp_path: Path) -> None:
    """Each reservation refused for good in turn: the ones before it, in every earlier run,
    are released."""
    summary = asyncio.run(_explorer(tmp_path).refusals())
    assert summary.failures == [], _violations(summary)
    assert summary.runs >= 3, summary.figures()
    assert set(summary.statuses) == {"COMPENSATED"}, summary.figures()


def _switch_leaving_the_inbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the switch opened run N+1 and left the events no wait had taken on run N
    (Temporal's signal lost across a continue-as-new without a drain)."""
    send = SqlStore._send

    def old_send(self: SqlStore, name: str, params: Mapping[str, Any], check: Any = None) -> None:
        if name != "move_pending_events":
            send(self, name, params, check)

    monkeypatch.setattr(SqlStore, "_send", old_send)


def test_the_explorer_finds_the_lost_event_with_the_move_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _switch_leaving_the_inbox(monkeypatch)
    summary = asyncio.run(_explorer(tmp_path).arrivals())
    assert "no-event-lost-across-a-switch" in _found(summary), summary.figures()
    assert _found(summary) <= INVARIANTS | {"no-lost-wakeup"}, _violations(summary)
