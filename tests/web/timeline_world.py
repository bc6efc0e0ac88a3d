"""A journal whose instances draw every kind of bar the visual timeline has: an effect, a
local step retried once, a timer, an effect whose outcome is UNKNOWN (the instance parks),
and in a second instance a compensation (it ends COMPENSATED)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from conditions import until
from ledgerflow import EffectCall, Engine, Participant, Registry, RetryPolicy, WorkflowContext
from ledgerflow.operators.service import Operations

registry = Registry()
shop = registry.add_participant(Participant("shop"))
# Business keys whose price step has failed once already (the retry then succeeds).
FAILED_ONCE: set[str] = set()
ONCE = RetryPolicy(attempts_max=1)


@shop.effect(classification="compensatable", compensation="release", retry=ONCE)
async def reserve(call: EffectCall) -> dict[str, Any]:
    return {"held": call.payload["seats"]}


@shop.compensation("release", retry=ONCE)
async def release(call: EffectCall) -> dict[str, Any]:
    return {"released": call.original_key}


@shop.effect(classification="compensatable", compensation="refund", retry=ONCE)
async def charge(call: EffectCall) -> dict[str, Any]:
    raise ConnectionError("the reply was lost")


@shop.compensation("refund", retry=ONCE)
async def refund(call: EffectCall) -> dict[str, Any]:
    return {"refunded": call.original_key}


def price(key: str) -> int:
    if key not in FAILED_ONCE:
        FAILED_ONCE.add(key)
        raise TimeoutError("the price service was slow")
    return 42


@registry.workflow(name="trip", version=1, business_failures=(ValueError,))
async def trip(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    held = await ctx.effect(reserve, {"seats": 2})
    amount = await ctx.step(
        "price",
        price,
        str(ctx.business_key),
        retry=RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=20)),
    )
    await ctx.sleep(0.05)
    if request.get("give_up"):
        raise ValueError("the customer gave up")
    paid = await ctx.effect(charge, {"amount": amount})
    return {"held": held, "paid": paid}


@dataclass(frozen=True)
class Trips:
    url: str
    parked: str  # reserve, price retried, timer, charge UNKNOWN: MANUAL_INTERVENTION
    compensated: str  # reserve, price retried, timer, gave up: released, COMPENSATED
    token: str  # root's (admin, every tenant)


def build(url: str) -> Trips:
    with Operations(url, registry=registry, migrate=None) as operations:
        parked = operations.start("trip", key="trip-1", input={})
        compensated = operations.start("trip", key="trip-2", input={"give_up": True})
        token, _ = operations.tokens().create(
            name="root", role="admin", tenant="*", created_by="test"
        )

    expected = {parked.instance_id: "MANUAL_INTERVENTION", compensated.instance_id: "COMPENSATED"}

    async def run() -> None:
        async with Engine(url, registry) as engine:
            worker = engine.worker(lease_seconds=1, poll_seconds=0.01)

            async def settled() -> bool:
                # Each round runs what is due; the retry and the timer come due between rounds.
                await worker.run(until_idle=True)
                statuses = {i: (await engine.detail(i)).instance.status.value for i in expected}
                return statuses == expected

            await until(settled, what="both trips to settle")

    asyncio.run(run())
    return Trips(
        url=url,
        parked=parked.instance_id,
        compensated=compensated.instance_id,
        token=token,
    )
