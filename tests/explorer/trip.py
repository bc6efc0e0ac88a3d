"""The classic trip-booking saga on scripted participants, for the explorer's saga runs.

Flight, hotel and car are booked in that order, each compensatable with its own cancel
operation; the car rental may refuse for good (a final rejection), which fails the workflow and
makes the engine cancel the hotel and then the flight.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import ledgerflow as lf
from ledgerflow.errors import WaitTimeoutError
from ledgerflow.testing import Behavior, Scenario, ScriptedParticipant, World

RETRY = lf.RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=10))


def trip_scenario(
    *,
    trips: int,
    car_refuses: bool = False,
    preconditions: bool = True,
    gathered: bool = False,
    approval: bool = False,
) -> Scenario:
    """``gathered``: the three are booked at once in one ``asyncio.gather`` (positions 1, 2, 3
    in call order), each branch noting its booking in a local step once it returned
    (positions 4, 5, 6, in the same order). ``approval`` (with ``gathered``): a fourth branch
    waits for ``approved`` (an hour at most) beside the bookings."""
    world = World(branches=gathered)
    registry = lf.Registry()
    participants = [
        ScriptedParticipant(
            name,
            world,
            operations={"book": "compensatable"},
            compensations={"book": "cancel"},
            deduplicates=dedupe,
            lookup=lookup,
            preconditions=preconditions,
            retry=RETRY,
        )
        for name, dedupe, lookup in (
            ("flight", True, True),
            ("hotel", False, True),
            ("car", True, True),
        )
    ]
    for participant in participants:
        registry.add_participant(participant.participant)
    flight, hotel, car = (p.effect("book") for p in participants)

    @registry.workflow(name="trip", version=1)
    async def trip(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
        booked = {}
        for name, booking in (("flight", flight), ("hotel", hotel), ("car", car)):
            booked[name] = await ctx.effect(booking, {"trip": request["trip"], "what": name})
        return booked

    @registry.workflow(name="trip-gathered", version=1)
    async def trip_gathered(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
        async def book(name: str, booking: Any) -> Any:
            evidence = await ctx.effect(booking, {"trip": request["trip"], "what": name})
            # Taken once the booking returned: at the same position whatever finished first.
            await ctx.step("note", str, name)
            return evidence

        async def approved() -> Any:
            try:
                return (await ctx.wait_for("approved", timeout=3600)).payload
            except WaitTimeoutError:
                return "timed out"

        bookings = (("flight", flight), ("hotel", hotel), ("car", car))
        branches = [book(n, b) for n, b in bookings]
        if request.get("approval"):
            branches.append(approved())
        booked = await asyncio.gather(*branches)
        return dict(zip(("flight", "hotel", "car", "approval"), booked, strict=False))

    if car_refuses:
        # Sold out for good: every delivery of a booking is refused, also after a crash.
        participants[2].script(Behavior.REJECT_FINAL, operation="book", times=1_000_000)
    return Scenario(
        registry=registry,
        world=world,
        participants=participants,
        starts=[
            (
                "trip-gathered" if gathered else "trip",
                f"trip-{n}",
                {"trip": n, "approval": approval},
            )
            for n in range(trips)
        ],
    )
