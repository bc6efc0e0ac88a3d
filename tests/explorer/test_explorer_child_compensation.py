"""The explorer crashes a parent whose saga undoes a succeeded child with its compensating
workflow, at every point (the compensating start and the taking of its ending included): the
oracle's compensated-child-once holds -- a compensating workflow only for a child that
SUCCEEDED, once, and COMPENSATED only with it done.

With the engine broken to take any ending for a success (a FAILED child compensated too), the
same sweep finds the violation: the check is not vacuous.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import ChildFailedError
from ledgerflow.runtime import child_compensations
from ledgerflow.testing import Explorer, Summary, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


class NoFlight(lf.BusinessFailure):
    """The parent's failure, after its children ended."""


def _family() -> lf.Registry:
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank", deduplicates=True))

    @bank.effect(classification="compensatable", compensation="refund")
    async def charge(call: lf.EffectCall) -> Any:
        return {}

    @bank.compensation("refund")
    async def refund(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="book", version=1)
    async def book(ctx: lf.WorkflowContext, n: int) -> Any:
        if n < 0:
            raise NoFlight("no room")
        return {"room": n}

    @registry.workflow(name="unbook", version=1)
    async def unbook(ctx: lf.WorkflowContext, booked: Any) -> Any:
        return await ctx.effect(charge, {"cancel_fee": booked["input"]})

    @registry.workflow(name="trip", version=1)
    async def trip(ctx: lf.WorkflowContext, n: int) -> Any:
        await ctx.effect(charge, {"deposit": n})
        await ctx.child(book, n, compensate_with=unbook)
        with contextlib.suppress(ChildFailedError):
            await ctx.child(book, -n, compensate_with=unbook)
        raise NoFlight("no seat left")

    return registry


def _sweep(tmp_path: Path) -> Summary:
    explorer = Explorer(scenario_for(_family(), "trip", [1]), folder=tmp_path)
    return asyncio.run(explorer.exhaustive(depth=1))


def test_every_crash_point_of_a_child_compensation_is_clean(tmp_path: Path) -> None:
    """Goal: a depth-1 crash sweep over the parent, its children and the compensating one
    finds no violation (the compensating start's points among those crashed: the tests of
    tests/runtime/test_child_compensation*.py show they fire); the parent ends COMPENSATED."""
    summary = _sweep(tmp_path)
    assert summary.failures == [], [str(v) for run in summary.failures for v in run.violations]
    assert "COMPENSATED" in summary.statuses
    assert summary.crashes > 0
    assert set(summary.statuses) <= {"COMPENSATED", "SUCCEEDED", "FAILED"}, summary.statuses


def test_the_sweep_finds_a_failed_child_compensated_with_the_check_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: compensated-child-once is not vacuous: an engine that undoes a FAILED child too
    is caught."""
    monkeypatch.setattr(child_compensations, "_succeeded", lambda outcome: True)
    summary = _sweep(tmp_path)
    found = {v.invariant for run in summary.failures for v in run.violations}
    assert "compensated-child-once" in found, summary.figures()
