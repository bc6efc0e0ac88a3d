"""The explorer on parallel branches: the trip booked in one ``asyncio.gather``.

The worker crashes at every fault point hit and again during recovery (depth 2), so between
every pair of the branches' writes (three intents in one commit, three dispatches and
outcomes in any order, the note, the ending, and the compensations when the car refuses).
Beside the oracle's invariants (no effect applied twice, compensations in reverse position
order and only of applied effects, truthful endings), a scenario with branches adds
``positions-replay``: each run's journal replays clean against its code, so the positions a
replay takes are those the run journaled, whatever order the branches finished in before and
after each crash.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from trip import trip_scenario

from ledgerflow.testing import Behavior, Explorer

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


@pytest.mark.parametrize("car_refuses", [False, True])
def test_every_crash_point_of_a_gathered_trip(tmp_path: Path, car_refuses: bool) -> None:
    explorer = Explorer(
        lambda: trip_scenario(trips=1, car_refuses=car_refuses, gathered=True), folder=tmp_path
    )
    summary = asyncio.run(explorer.exhaustive(depth=2))
    assert summary.failures == [], summary.shortest_failure()
    ending = "COMPENSATED" if car_refuses else "SUCCEEDED"
    assert summary.statuses == {ending: summary.runs}, summary.statuses
    assert summary.runs > 50


def test_a_cancel_and_a_signal_at_every_point_of_a_gathered_trip(tmp_path: Path) -> None:
    """A cancel request, then a signal, at every fault point hit of the gathered trip: a
    request that wins refuses the three intents together (none dispatched) or stops the
    branches after what was dispatched ended; each run ends with an outcome."""
    explorer = Explorer(lambda: trip_scenario(trips=1, gathered=True), folder=tmp_path)
    summary = asyncio.run(explorer.arrivals())
    assert summary.failures == [], summary.shortest_failure()
    assert summary.outside.cancels > 0
    assert set(summary.statuses) <= {"SUCCEEDED", "CANCELLED"}, summary.statuses
    assert summary.statuses["CANCELLED"] > 0


def test_random_failures_of_twenty_gathered_trips(tmp_path: Path) -> None:
    """Seeds with crashes, lost replies, refusals, cancel requests and signals anywhere, over
    twenty gathered trips run at once by one worker: no violation."""
    explorer = Explorer(lambda: trip_scenario(trips=20, gathered=True), folder=tmp_path)
    misbehaviour = {
        Behavior.LOSE_REPLY: 0.03,
        Behavior.TIMEOUT: 0.02,
        Behavior.REJECT: 0.03,
        Behavior.REJECT_FINAL: 0.04,
        Behavior.LATE: 0.02,
    }
    summary = asyncio.run(explorer.random(range(20), misbehaviour=misbehaviour))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.statuses["SUCCEEDED"] > 0
    assert summary.statuses["COMPENSATED"] > 0


def test_every_crash_point_of_a_gathered_trip_beside_a_wait(tmp_path: Path) -> None:
    """A fourth branch waits for an approval beside the three bookings: the instance is
    WAITING only once the bookings are settled, the approval (or its timeout) resumes it at
    the same positions, and a crash at every pair of points changes none of that."""
    explorer = Explorer(
        lambda: trip_scenario(trips=1, gathered=True, approval=True), folder=tmp_path
    )
    summary = asyncio.run(explorer.exhaustive(depth=2))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.statuses == {"SUCCEEDED": summary.runs}, summary.statuses
    assert summary.paths >= 2  # the approval arrives, or the hour passes
    assert summary.runs > 50


def test_a_cancel_and_a_signal_at_every_point_of_a_gathered_trip_beside_a_wait(
    tmp_path: Path,
) -> None:
    """A cancel request, then the approval, at every fault point hit while the bookings and
    the wait run at once: a request that arrives while the branches park is refused with the
    park (the instance cancels instead), and every run ends with an outcome."""
    explorer = Explorer(
        lambda: trip_scenario(trips=1, gathered=True, approval=True), folder=tmp_path
    )
    summary = asyncio.run(explorer.arrivals())
    assert summary.failures == [], summary.shortest_failure()
    assert summary.outside.cancels > 0
    assert summary.statuses["CANCELLED"] > 0
