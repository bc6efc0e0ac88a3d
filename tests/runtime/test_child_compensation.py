"""A parent's saga undoes a child that SUCCEEDED with the compensating workflow the child was
started with (``compensate_with=``): once, in reverse position order among the effects' own
compensations, truthfully when it fails, on a cancel that asks to undo.

Every test runs on a real SQLite file and on PostgreSQL (``journal_url``) with real workers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash


class Boom(lf.BusinessFailure):
    """The parent's declared failure, after its child succeeded."""


class Trip:
    """``trip`` charges a card, books a hotel as a child (undone by ``cancel_hotel``), then
    charges again and fails when told to; what ran is kept in ``log``."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.registry = registry = lf.Registry()
        bank = registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.effect(classification="compensatable", compensation="refund")
        async def charge(call: lf.EffectCall) -> str:
            self.log.append(f"charge {call.payload}")
            return "charged"

        @bank.compensation("refund")
        async def refund(call: lf.EffectCall) -> str:
            self.log.append(f"refund {call.payload}")
            return "refunded"

        @registry.workflow(name="book_hotel", version=1)
        async def book_hotel(ctx: lf.WorkflowContext, nights: int) -> dict[str, Any]:
            self.log.append(f"book {nights}")
            return {"booking": f"H-{nights}"}

        @registry.workflow(name="cancel_hotel", version=1)
        async def cancel_hotel(ctx: lf.WorkflowContext, booked: dict[str, Any]) -> str:
            if booked["input"] < 0:
                raise Boom("the hotel refuses to cancel")
            self.log.append(f"cancel {booked['result']['booking']} ({booked['input']} nights)")
            return "cancelled"

        @registry.workflow(name="trip", version=1)
        async def trip(ctx: lf.WorkflowContext, plan: dict[str, Any]) -> str:
            await ctx.effect(charge, "deposit")
            await ctx.child(book_hotel, plan["nights"], compensate_with=cancel_hotel)
            await ctx.effect(charge, "balance")
            if plan.get("wait"):
                await ctx.wait_for("go")
            if plan.get("fail"):
                raise Boom("no flight")
            return "booked"


async def _work(engine: lf.Engine) -> None:
    await engine.worker(poll_seconds=0.01).run(until_idle=True)


def _compensating(detail: Any) -> list[Any]:
    return [s for s in detail.steps if s.kind is StepKind.CHILD and s.seq < 0]


def test_a_failed_parent_undoes_its_succeeded_child_once_in_reverse_order(
    journal_url: str,
) -> None:
    """Goal: the parent fails after the child succeeded: the compensating workflow runs once,
    after the later effect's refund and before the earlier one's, gets the child's input and
    result, and the parent ends COMPENSATED naming it; its step names the compensating
    instance."""
    trip = Trip()

    async def main() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("trip", key="t-1", input={"nights": 2, "fail": True})
            await _work(engine)
            parent = await engine.get(started.instance_id)
            assert parent.status is lf.InstanceStatus.COMPENSATED, parent.reason
            assert trip.log == [
                "charge deposit",
                "book 2",
                "charge balance",
                "refund balance",
                "cancel H-2 (2 nights)",
                "refund deposit",
            ]
            [step] = _compensating(await engine.detail(started.instance_id))
            assert step.seq == -2
            assert step.status is StepStatus.COMPLETED
            compensating = await engine.list(workflow="cancel_hotel", limit=5)
            assert [c.business_key for c in compensating] == ["t-1/r1/s2/child/compensate"]
            assert compensating[0].instance_id in (step.input or "")
            assert compensating[0].parent_instance_id == started.instance_id
            assert compensating[0].instance_id in (parent.reason or "")

    asyncio.run(main())


def test_a_failing_compensating_workflow_never_ends_the_parent_compensated(
    journal_url: str,
) -> None:
    """Goal: the compensating workflow fails: the parent is parked for a person
    (MANUAL_INTERVENTION, compensation_failed), never COMPENSATED; the earlier effect's
    refund, later in the order, has not run."""
    trip = Trip()

    async def main() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("trip", key="t-2", input={"nights": -1, "fail": True})
            await _work(engine)
            parent = await engine.get(started.instance_id)
            assert parent.status is lf.InstanceStatus.MANUAL_INTERVENTION
            assert parent.reason_code == "compensation_failed"
            assert "refund deposit" not in trip.log
            assert "refund balance" in trip.log
            [compensating] = await engine.list(workflow="cancel_hotel", limit=5)
            assert compensating.status is lf.InstanceStatus.FAILED

    asyncio.run(main())


def test_a_parent_that_succeeds_or_a_child_without_one_is_no_obligation(
    journal_url: str,
) -> None:
    """Goal: a parent that succeeds starts no compensating workflow."""
    trip = Trip()

    async def main() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("trip", key="t-3", input={"nights": 1})
            await _work(engine)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.SUCCEEDED
            assert await engine.list(workflow="cancel_hotel", limit=5) == []

    asyncio.run(main())


def test_a_cancel_of_the_parent_undoes_the_child(journal_url: str) -> None:
    """Goal: a cancel asking to undo, while the parent waits after the child succeeded, runs
    the compensating workflow; the parent ends CANCELLED."""
    trip = Trip()

    async def main() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("trip", key="t-4", input={"nights": 3, "wait": True})
            await _work(engine)
            await engine.cancel(started.instance_id, reason="plans changed")
            await _work(engine)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.CANCELLED
            assert trip.log.count("cancel H-3 (3 nights)") == 1
            [compensating] = await engine.list(workflow="cancel_hotel", limit=5)
            assert compensating.status is lf.InstanceStatus.SUCCEEDED

    asyncio.run(main())


@pytest.mark.parametrize(
    "point", ["child.before_compensate", "child.after_compensate", "child.before_compensate_take"]
)
def test_a_crash_around_the_compensating_start_starts_it_once(journal_url: str, point: str) -> None:
    """Goal: a worker crashing before or after the compensating start, or before taking its
    ending, leaves one compensating instance, run once, and the parent COMPENSATED."""
    trip = Trip()

    async def main() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("trip", key="t-5", input={"nights": 4, "fail": True})
            faults.install(FaultPlan([FaultRule(point=point, action="crash")]))
            try:
                with pytest.raises(SimulatedCrash):
                    await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)
            finally:
                faults.install(None)
        async with lf.Engine(journal_url, trip.registry) as engine:
            await _work(engine)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.COMPENSATED
            assert trip.log.count("cancel H-4 (4 nights)") == 1
            assert len(await engine.list(workflow="cancel_hotel", limit=5)) == 1

    asyncio.run(main())


def test_a_child_of_an_earlier_run_stays_an_obligation_across_continue_as_new(
    journal_url: str,
) -> None:
    """Goal: a child that succeeded in run 1 is undone when run 2 fails after
    continue-as-new, as an effect of an earlier run would be."""
    trip = Trip()

    @trip.registry.workflow(name="chain", version=1)
    async def chain(ctx: lf.WorkflowContext, turn: int) -> None:
        if turn == 1:
            await ctx.child("book_hotel", 5, compensate_with="cancel_hotel")
            ctx.continue_as_new(2)
        raise Boom("the second run fails")

    async def main() -> None:
        async with lf.Engine(journal_url, trip.registry) as engine:
            started = await engine.start("chain", key="c-1", input=1)
            await _work(engine)
            ended = await engine.get(started.instance_id)
            assert ended.status is lf.InstanceStatus.COMPENSATED, ended.reason
            assert ended.run == 2
            assert trip.log.count("cancel H-5 (5 nights)") == 1
            [undoing] = await engine.list(workflow="cancel_hotel", limit=5)
            assert undoing.business_key == "c-1/r1/s1/child/compensate"

    asyncio.run(main())
