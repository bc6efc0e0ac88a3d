"""The explorer on schedules: a schedule fires its slots for five minutes while each fired run
books a room and sleeps past the next slot (overlap ``buffer_one``), and a crash at every fault
point — the tick's own after its claim, after its advance, before and after its commit
among them — leaves one instance or one
recorded non-firing per slot, every booking once, every instance ended; a cancel or a signal
at every point too. With the slot's row and its instance written in two transactions (the
check-then-insert gap a leader-less scheduler must not have), the same sweep finds a FIRED
slot without its instance.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.testing import Explorer, Scenario, Summary, scenario_for
from ledgerflow.testing.schedule_checks import INVARIANT

pytestmark = [pytest.mark.slow, pytest.mark.simulated]

HORIZON = 150.0  # two slots, a minute apart


def _hotel() -> lf.Registry:
    registry = lf.Registry()
    rooms = registry.add_participant(lf.Participant("rooms", deduplicates=True))

    @rooms.effect(classification="reversible", compensation="free")
    async def hold(call: lf.EffectCall) -> Any:
        return {}

    @rooms.compensation("free")
    async def free(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="sweep", version=1)
    async def sweep(ctx: lf.WorkflowContext, payload: Any) -> Any:
        await ctx.effect(hold, {"slot": str(ctx.scheduled)})
        await ctx.sleep(90)  # past the next slot: it overlaps
        return "swept"

    registry.schedule("nightly", workflow=sweep, every=60, overlap="buffer_one")
    return registry


def _explorer(tmp_path: Path) -> Explorer:
    base = scenario_for(_hotel(), "sweep", [])

    def make() -> Scenario:
        scenario = base()
        scenario.schedule_horizon = HORIZON
        return scenario

    return Explorer(make, folder=tmp_path)


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


def test_a_crash_at_every_point_of_the_firings_leaves_one_outcome_per_slot(
    tmp_path: Path,
) -> None:
    explorer = _explorer(tmp_path)

    async def explore() -> tuple[list[str], dict[str, int], Summary]:
        baseline = (await explorer.paths())[0][1]
        return baseline.hits, dict(baseline.statuses), await explorer.exhaustive(depth=1)

    hits, statuses, summary = asyncio.run(explore())
    points = {h.split(" ", 2)[1] for h in hits}
    assert {"schedule.before_fire", "schedule.after_fire"} <= points
    assert statuses.get("SUCCEEDED", 0) >= 2  # the slots fired (the buffered one too)
    assert summary.failures == [], _violations(summary)
    assert summary.crashes >= len(hits)


def test_a_cancel_or_a_signal_at_every_point_keeps_one_outcome_per_slot(tmp_path: Path) -> None:
    summary = asyncio.run(_explorer(tmp_path).arrivals())
    assert summary.failures == [], _violations(summary)


def test_a_slot_written_apart_from_its_instance_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tick's writes each committed on its own, no transaction around them: a crash after
    # the advance (schedule.after_advance) leaves a FIRED slot without its instance.
    monkeypatch.setattr(SqlStore, "transaction", lambda self: contextlib.nullcontext())
    summary = asyncio.run(_explorer(tmp_path).exhaustive(depth=1))
    assert INVARIANT in _found(summary)
