"""The explorer on debounced starts (issue 27): each key's caller makes a burst of three
debounced starts, swept with the workers' lives, so a crash lands just before and just after
every debounce transaction and the caller asks again; the oracle holds (one instance, created
once, every further start debounced into it, the last input held and run, nothing claimed
before its moved time). With a collapse that forgets to take the new input, the same sweep
finds it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.testing import Explorer, StartSpec, Summary, scenario_for
from ledgerflow.testing.debounce_checks import STALE_INPUT
from planted_sql import plant_sql

pytestmark = [pytest.mark.slow, pytest.mark.simulated]

WINDOW = 600.0
BURST = StartSpec(
    options={"debounce_seconds": WINDOW, "debounce_max_seconds": 3 * WINDOW}, then=(2, 3)
)


def _shipping() -> lf.Registry:
    registry = lf.Registry()
    depot = registry.add_participant(lf.Participant("depot", deduplicates=True))

    @depot.effect(classification="forward-recovery-only")
    async def book(call: lf.EffectCall) -> Any:
        return {"booked": call.payload}

    @registry.workflow(name="ship", version=1)
    async def ship(ctx: lf.WorkflowContext, parcel: int) -> Any:
        return await ctx.effect(book, {"parcel": parcel})

    return registry


def _explorer(tmp_path: Path) -> Explorer:
    return Explorer(scenario_for(_shipping(), "ship", [1], starts=BURST), folder=tmp_path)


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


def test_a_crash_around_every_debounced_start_breaks_no_promise(tmp_path: Path) -> None:
    """Every fault point of the fault-free run, the three starts' commits among them (six
    start points), crashed once: the caller retries, and every promise holds."""
    explorer = _explorer(tmp_path)

    async def explore() -> tuple[list[str], Summary]:
        baseline = (await explorer.paths())[0][1]
        return baseline.hits, await explorer.exhaustive(depth=1)

    hits, summary = asyncio.run(explore())
    starts = [h for h in hits if h.split(" ", 2)[1].startswith("start.")]
    assert len(starts) == 6, hits
    assert summary.failures == [], _violations(summary)
    assert summary.runs > len(hits)
    # The workers' points crashed the run; the starts' crashed their caller, who asked again.
    assert summary.crashes >= len(hits) - len(starts)


def test_a_collapse_that_keeps_the_old_input_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted defect: the collapse moves the start but keeps the pending input (its update
    without ``input = :input``): debounce-ran-stale-input."""
    plant_sql(monkeypatch, "debounce_start", "SET input = :input, ", "SET ")
    summary = asyncio.run(_explorer(tmp_path).exhaustive(depth=1))
    found = {v.invariant for run in summary.failures for v in run.violations}
    assert STALE_INPUT in found, _violations(summary)
