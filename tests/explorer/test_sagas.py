"""The explorer on a saga: crashes during compensation, random failures, a broken planner.

The trip saga's car rental refuses, so every run compensates the hotel and the flight; the
oracle checks that compensations ran only for applied effects, at most once, in reverse order,
and that COMPENSATED means every confirmed effect was undone.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from trip import trip_scenario

import breakages
from ledgerflow.testing import Behavior, Explorer

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


def test_a_cancel_and_a_signal_at_every_point_of_a_compensating_saga(tmp_path: Path) -> None:
    """A cancel request, then a signal, at every fault point hit of a trip that compensates
    (during its compensation too): each ends with an outcome, nothing is left pending."""
    explorer = Explorer(lambda: trip_scenario(trips=1, car_refuses=True), folder=tmp_path)
    summary = asyncio.run(explorer.arrivals())
    print(json.dumps(summary.figures()))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.outside.cancels > 0
    assert summary.outside.signals > 0


def test_every_crash_point_of_a_compensating_saga(tmp_path: Path) -> None:
    """Crash at every fault point hit (depth 2) of a trip whose car refuses: every run ends
    COMPENSATED with each compensation applied exactly once and nothing else undone."""
    explorer = Explorer(lambda: trip_scenario(trips=1, car_refuses=True), folder=tmp_path)
    summary = asyncio.run(explorer.exhaustive(depth=2))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.statuses == {"COMPENSATED": summary.runs}
    assert summary.runs > 50


def test_random_saga_failures(tmp_path: Path) -> None:
    """Seeds with crashes, lost replies, final refusals, cancel requests and signals anywhere,
    over 20 concurrent trips: no violation, and every terminal state is one docs/design.md allows
    for a saga."""
    explorer = Explorer(lambda: trip_scenario(trips=20), folder=tmp_path)
    misbehaviour = {
        Behavior.LOSE_REPLY: 0.03,
        Behavior.TIMEOUT: 0.02,
        Behavior.REJECT: 0.03,
        Behavior.REJECT_FINAL: 0.04,
        Behavior.LATE: 0.02,
    }
    summary = asyncio.run(explorer.random(range(40), misbehaviour=misbehaviour))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.statuses["COMPENSATED"] > 0
    assert summary.statuses["SUCCEEDED"] > 0
    assert set(summary.statuses) <= {
        "SUCCEEDED",
        "COMPENSATED",
        "FAILED",
        "CANCELLED",
        "MANUAL_INTERVENTION",
    }


@pytest.fixture
def compensating_unconfirmed() -> Iterator[None]:
    with breakages.broken(breakages.COMPENSATE_UNCONFIRMED):
        yield


@pytest.mark.usefixtures("compensating_unconfirmed")
def test_explorer_finds_compensation_of_an_unconfirmed_effect(tmp_path: Path) -> None:
    """With the engine broken to compensate effects that were never confirmed, the explorer
    finds the refused car being cancelled. Preconditions are off so that nothing stops the
    broken compensation before it reaches the participant."""
    explorer = Explorer(
        lambda: trip_scenario(trips=1, car_refuses=True, preconditions=False), folder=tmp_path
    )
    summary = asyncio.run(explorer.exhaustive(depth=1))
    found = {v.invariant for run in summary.failures for v in run.violations}
    assert "compensation-only-for-applied" in found, found
