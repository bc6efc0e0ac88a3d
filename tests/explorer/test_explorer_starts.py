"""The explorer on start options: the caller's start is swept with the workers' lives, so a
crash just before or just after a start's commit (a delayed start, a ``signal_with_start``)
is met by a caller that asks again with the same key, and the oracle holds: one instance per
key created by one commit, a retry's answer that says truthfully whether it created it, the
event sent with the start kept once, and nothing of a delayed instance run before its time —
also with a cancel request or a signal arriving at every point, SCHEDULED included.

With a start that forgets its delay, or one that answers ``created`` to every caller, the same
sweep finds it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.runtime import core
from ledgerflow.testing import Explorer, StartSpec, Summary, scenario_for
from ledgerflow.testing.start_sweep import CREATED_ONCE, NOT_BEFORE_ITS_TIME

pytestmark = [pytest.mark.slow, pytest.mark.simulated]

DELAY = 600.0
DELAYED = StartSpec(options={"start_in": DELAY})
WITH_SIGNAL = StartSpec(options={"start_in": DELAY}, signal="go", payload={"lane": 2})


def _shipping() -> lf.Registry:
    registry = lf.Registry()
    depot = registry.add_participant(lf.Participant("depot", deduplicates=True))

    @depot.effect(classification="reversible", compensation="unbook")
    async def book(call: lf.EffectCall) -> Any:
        return {}

    @depot.compensation("unbook")
    async def unbook(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="ship", version=1)
    async def ship(ctx: lf.WorkflowContext, parcel: int) -> Any:
        await ctx.effect(book, {"parcel": parcel})
        go = await ctx.wait_for("go", timeout=3_600)
        lane = go.payload.get("lane") if isinstance(go.payload, dict) else None
        return {"parcel": parcel, "lane": lane}

    return registry


def _explorer(tmp_path: Path, spec: StartSpec) -> Explorer:
    factory = scenario_for(_shipping(), "ship", [1], signal="go", starts=spec)
    return Explorer(factory, folder=tmp_path)


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


# Depth 2 (a second crash in the recovery, a caller that dies twice) where the run is short:
# the delayed start's two paths (the signal, the timeout) take 6x as long at that depth.
@pytest.mark.parametrize(
    ("spec", "depth"), [(DELAYED, 1), (WITH_SIGNAL, 2)], ids=["start_in", "signal_with_start"]
)
def test_a_crash_at_every_point_a_start_included_breaks_no_promise(
    tmp_path: Path, spec: StartSpec, depth: int
) -> None:
    """Every fault point of the fault-free run, the starts' commits among them, crashed at
    once (and again in the recovery): the caller retries, and every promise holds."""
    explorer = _explorer(tmp_path, spec)

    async def explore() -> tuple[list[str], Summary]:
        baseline = (await explorer.paths())[0][1]
        return baseline.hits, await explorer.exhaustive(depth=depth)

    hits, summary = asyncio.run(explore())
    points = {h.split(" ", 2)[1] for h in hits}
    assert {"start.before_commit", "start.after_commit"} <= points
    assert summary.failures == [], _violations(summary)
    assert summary.runs > len(hits)
    # Every run of the first sweep crashed once at least, the starts' runs among them.
    assert summary.crashes >= len(hits)


def test_a_cancel_or_a_signal_at_every_point_reaches_a_delayed_instance(tmp_path: Path) -> None:
    """A cancel request or the awaited signal arriving at every hit (while SCHEDULED too):
    each ends with an outcome, and nothing ran before its time."""
    summary = asyncio.run(_explorer(tmp_path, DELAYED).arrivals())
    assert summary.failures == [], _violations(summary)
    assert {"CANCELLED", "SUCCEEDED"} <= set(summary.statuses)


def test_a_start_that_forgets_its_delay_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare = core.EngineCore.prepare

    def undelayed(self: core.EngineCore, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("start_in", None)
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(core.EngineCore, "prepare", undelayed)
    summary = asyncio.run(_explorer(tmp_path, DELAYED).exhaustive(depth=1))
    assert NOT_BEFORE_ITS_TIME in _found(summary)


def test_a_retry_told_it_created_the_instance_again_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = core.EngineCore.started

    def always_created(self: core.EngineCore, *args: Any, **kwargs: Any) -> Any:
        kwargs["created"] = True
        return started(self, *args, **kwargs)

    monkeypatch.setattr(core.EngineCore, "started", always_created)
    summary = asyncio.run(_explorer(tmp_path, DELAYED).exhaustive(depth=1))
    assert _found(summary) == {CREATED_ONCE}
