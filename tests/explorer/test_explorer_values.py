"""The explorer on published values: a workflow publishes before and after an effect and a
wait; a crash at every fault point, and a tick or a cancel arriving at every point, never show
a value the journal does not hold nor a version that is not its count of publications (the
oracle's value checks); and with a publication written again on each replay (the bug of a
value kept outside the journal's step), the explorer finds the doubled version. A workflow
with a declared update handler gets an update request at every point instead of its event:
each is applied once and answered once (an update taken apart from its inbox row is found).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.ledger.records import NoCancelRequest
from ledgerflow.ledger.values import PublishValue
from ledgerflow.runtime import update_handlers, values
from ledgerflow.testing import Explorer, Rates, Summary, scenario_for

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


def _noted(payload: Any) -> str:
    return str(payload)


def _updater() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="updater", version=1)
    async def updater(ctx: lf.WorkflowContext, who: str) -> int:
        seen: list[str] = []

        async def add(payload: Any) -> int:
            seen.append(await ctx.step("note", _noted, payload))
            return len(seen)

        ctx.on_update("add", add)
        ctx.publish("stage", "waiting")
        await ctx.wait_for("tick")
        ctx.publish("stage", len(seen))
        return len(seen)

    return registry


def _update_explorer(tmp_path: Path) -> Explorer:
    # Every arrival at a fault point is an update request "add" (from outside, as
    # engine.update stores it); the wait's own "tick" comes at the quiet moments.
    scenario = scenario_for(_updater(), "updater", ["a", "b"], signal="update:add")
    return Explorer(scenario, folder=tmp_path)


def test_an_update_at_every_point_is_applied_once_and_answered_once(tmp_path: Path) -> None:
    """An update request arriving at each fault point hit (a cancel too): taken under the wait
    at most once, answered once when taken, refused without a reply when it came too late;
    the wait still ends by its tick; and random crashes among such arrivals keep it so."""
    explorer = _update_explorer(tmp_path)
    summary = asyncio.run(explorer.arrivals())
    assert summary.failures == [], _violations(summary)
    rates = Rates(crash=0.05, signal=0.2, cancel=0.02)
    chaos = asyncio.run(explorer.random(range(12), rates=rates))
    assert chaos.failures == [], _violations(chaos)
    assert chaos.crashes > 0, chaos.figures()


def test_the_explorer_finds_an_update_applied_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the take of a request did not consume it from the inbox (the bug of an update
    handled apart from its inbox row), so the next turn of the wait handled it again."""
    monkeypatch.setattr(update_handlers, "ConsumeDelivery", lambda **_: NoCancelRequest())
    summary = asyncio.run(_update_explorer(tmp_path).arrivals())
    assert "update-applied-once" in _found(summary), summary.figures()
