"""The explorer on children awaited inside parallel branches (issue 26): a trip that books its
flight and its hotel as two child workflows in one ``asyncio.gather``, then notes the trip.

The worker crashes at every fault point hit, the child protocol's included (``child.*``
around each start, each take of an ending and each park), in the parent and in both children.
The oracle's checks hold in every run: one child per parent position, every child's ending
in its parent's inbox, no effect applied twice, every instance ended truthfully, and
``positions-replay``: the parent's journal replays clean against its code, so the results
come back in call order however the two children ended around each crash.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.runtime import children as children_module
from ledgerflow.testing import Explorer, Scenario, ScriptedParticipant, Summary, World

pytestmark = [pytest.mark.slow, pytest.mark.simulated]

RETRY = lf.RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=10))


def _scenario(*, slow_flight: bool = False) -> Scenario:
    """``slow_flight``: the flight's child sleeps a minute before booking, so the hotel's
    child ends first and the parent takes its ending on a resumption of its own: the results
    still come back in call order."""
    world = World(branches=True)
    registry = lf.Registry()
    participants = [
        ScriptedParticipant(
            name,
            world,
            operations={"book": "compensatable"},
            compensations={"book": "cancel"},
            deduplicates=True,
            lookup=True,
            retry=RETRY,
        )
        for name in ("flight", "hotel")
    ]
    for participant in participants:
        registry.add_participant(participant.participant)
    flight, hotel = (p.effect("book") for p in participants)

    @registry.workflow(name="book-flight", version=1)
    async def book_flight(ctx: lf.WorkflowContext, trip: int) -> Any:
        if slow_flight:
            await ctx.sleep(60)
        return await ctx.effect(flight, {"trip": trip})

    @registry.workflow(name="book-hotel", version=1)
    async def book_hotel(ctx: lf.WorkflowContext, trip: int) -> Any:
        return await ctx.effect(hotel, {"trip": trip})

    @registry.workflow(name="trip-children", version=1)
    async def trip_children(ctx: lf.WorkflowContext, trip: int) -> dict[str, Any]:
        async def booked(what: str, child: Any) -> Any:
            evidence = await ctx.child(child, trip)
            # Taken once the child's result returned: the same position whatever ended first.
            await ctx.step("note", str, what)
            return evidence

        flight_booked, hotel_booked = await asyncio.gather(
            booked("flight", book_flight), booked("hotel", book_hotel)
        )
        return {"flight": flight_booked, "hotel": hotel_booked}

    return Scenario(
        registry=registry,
        world=world,
        participants=participants,
        starts=[("trip-children", "trip-0", 0)],
    )


def _violations(summary: Summary) -> list[str]:
    return [str(v) for run in summary.failures for v in run.violations]


@pytest.mark.parametrize("slow_flight", [False, True])
def test_every_crash_point_of_a_trip_gathering_two_children(
    tmp_path: Path, slow_flight: bool
) -> None:
    """Goal: a crash at every fault point hit of the parent and of both children leaves no
    violation; every run ends with the trip SUCCEEDED, and the sweep reached the child
    protocol's points in branches.

    Method: the explorer's exhaustive sweep at depth 2 (every point, and again at every
    point of the recovery) over the scenario above; the points of its fault-free run."""
    explorer = Explorer(lambda: _scenario(slow_flight=slow_flight), folder=tmp_path)

    async def explore() -> tuple[set[str], Summary]:
        baseline = (await explorer.paths())[0][1]
        return {h.split(" ", 2)[1] for h in baseline.hits}, await explorer.exhaustive(depth=2)

    points, summary = asyncio.run(explore())
    assert {"child.before_start", "child.after_start", "child.before_take"} <= points, points
    assert "wait.before_suspend" in points, points  # the parent parked for both children
    assert summary.failures == [], _violations(summary)
    assert summary.crashes >= len(points), summary.figures()
    assert set(summary.statuses) == {"SUCCEEDED"}, summary.statuses
    assert summary.runs > 20


def test_a_cancel_and_a_signal_at_every_point_of_a_trip_gathering_two_children(
    tmp_path: Path,
) -> None:
    """Goal: a cancel request on the parent at every point hit (before the starts, while both
    children run, while the parent waits for them) is answered: runs end SUCCEEDED or
    CANCELLED (the cascade cancelling the children still running), none in violation.

    Method: the explorer's arrivals sweep over the scenario above."""
    summary = asyncio.run(Explorer(_scenario, folder=tmp_path).arrivals())
    assert summary.failures == [], _violations(summary)
    assert summary.outside.cancels > 0
    assert summary.statuses.get("CANCELLED", 0) > 0, summary.statuses


def test_the_sweep_finds_results_handed_back_as_they_end_with_the_order_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: ``positions-replay`` is not vacuous here: with a child's result handed back as
    soon as its ending is taken (held as a wait, but not a call in the run's order), a run in
    which the hotel ends first notes it at the first note's position, and the replay, where
    both results are in the journal, takes them in call order: the sweep says so.

    Method: ``ChildHandle.result`` replaced by the unordered take; the depth-1 sweep."""

    async def unordered(self: children_module.ChildHandle) -> Any:
        key = (10_000 + int(self.seq), 0)  # a place no open call is behind
        return children_module._outcome(self, await children_module._take(self, order=key))

    monkeypatch.setattr(children_module.ChildHandle, "result", unordered)
    explorer = Explorer(lambda: _scenario(slow_flight=True), folder=tmp_path)
    summary = asyncio.run(explorer.exhaustive(depth=1))
    found = {v.invariant for run in summary.failures for v in run.violations}
    assert "positions-replay" in found, summary.figures()
