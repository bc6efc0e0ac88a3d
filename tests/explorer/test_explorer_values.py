"""The explorer on published values: a workflow publishes before and after an effect and a
wait; a crash at every fault point, and a tick or a cancel arriving at every point, never show
a value the journal does not hold nor a version that is not its count of publications (the
oracle's value checks); and with a publication written again on each replay (the bug of a
value kept outside the journal's step), the explorer finds the doubled version.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.ledger.values import PublishValue
from ledgerflow.runtime import values
from ledgerflow.testing import Explorer, Summary, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


def _publisher() -> lf.Registry:
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))

    @stock.effect(classification="reversible", compensation="release")
    async def reserve(call: lf.EffectCall) -> Any:
        return {"reserved": call.payload}

    @stock.compensation("release")
    async def release(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="publisher", version=1)
    async def publisher(ctx: lf.WorkflowContext, who: str) -> str:
        ctx.publish("stage", "reserving")
        await ctx.effect(reserve, {"who": who})
        ctx.publish("stage", "waiting")
        await ctx.wait_for("tick")
        ctx.publish("stage", "done")
        return who

    return registry


def _explorer(tmp_path: Path) -> Explorer:
    scenario = scenario_for(_publisher(), "publisher", ["a", "b"], signal="tick")
    return Explorer(scenario, folder=tmp_path)


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


def test_a_crash_at_every_point_never_shows_a_value_early_or_twice(tmp_path: Path) -> None:
    """Every fault point of the fault-free run, crashed at once: each instance succeeds with
    its value at version 3, as the journal publishes it."""
    summary = asyncio.run(_explorer(tmp_path).exhaustive(depth=1))
    assert summary.failures == [], _violations(summary)
    assert summary.crashes > 0, summary.figures()
    assert set(summary.statuses) == {"SUCCEEDED"}, summary.figures()


def test_an_event_or_a_cancel_at_every_point_keeps_values_with_their_steps(
    tmp_path: Path,
) -> None:
    summary = asyncio.run(_explorer(tmp_path).arrivals())
    assert summary.failures == [], _violations(summary)


def test_the_explorer_finds_a_publication_written_again_on_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a replayed position wrote its value again (a value kept apart from its step:
    each resumption after a wait bumps the version of what was published once)."""
    publish = values.publish

    def again_on_replay(ctx: Any, name: str, value: Any, *, reply: bool = False) -> None:
        taken = ctx._seq
        publish(ctx, name, value, reply=reply)
        s = ctx._session
        if not any(isinstance(w, PublishValue) and w.seq == taken + 1 for w in s.riders):
            text = s.codec.encode(value)
            s.riders.append(PublishValue(name=name, value=text, run=s.instance.run, seq=taken + 1))

    monkeypatch.setattr(values, "publish", again_on_replay)
    summary = asyncio.run(_explorer(tmp_path).exhaustive(depth=1))
    assert "value-one-version-per-publication" in _found(summary), summary.figures()
