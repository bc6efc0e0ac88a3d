"""A workflow in several editions of its code, for replay, upgrade and migration tests.

``shop(edition)`` builds a registry whose workflow ``order`` v1 is that edition of the code
(``v2`` also registers an ``order`` v2). The participants record every call they receive, so a
test can prove the replay checker dispatched nothing. Run with ``v1`` code, an order makes
these journal positions: 1 local ``price``, 2 effect ``stock.hold``, 3 (with ``wait``) a wait
for ``go``, then local ``note`` and effect ``mail.send``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import ledgerflow as lf

QUICK = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=1))


def price_of(items: list[int]) -> int:
    return sum(items)


def note_of(amount: int) -> str:
    return f"held {amount}"


@dataclass
class Shop:
    registry: lf.Registry
    calls: list[str] = field(default_factory=list)


def _participants(shop: Shop) -> tuple[Any, Any]:
    stock = shop.registry.add_participant(lf.Participant("stock", deduplicates=True))
    mail = shop.registry.add_participant(lf.Participant("mail", deduplicates=True))

    @stock.effect(classification="reversible", retry=QUICK)
    async def hold(call: lf.EffectCall) -> dict[str, Any]:
        shop.calls.append(f"hold {call.idempotency_key}")
        return {"held": call.payload}

    @mail.effect(classification="forward-recovery-only", retry=QUICK)
    async def send(call: lf.EffectCall) -> dict[str, Any]:
        shop.calls.append(f"send {call.idempotency_key}")
        return {"sent": call.payload}

    return hold, send


def shop(edition: str = "v1") -> Shop:
    made = Shop(registry=lf.Registry())
    hold, send = _participants(made)
    register = made.registry.workflow(name="order", version=1, step_retry=QUICK)

    async def opening(ctx: lf.WorkflowContext, order: dict[str, Any]) -> int:
        price: int = await ctx.step("price", price_of, order["items"])
        await ctx.effect(hold, {"sku": order["sku"]})
        if order.get("wait"):
            await ctx.wait_for("go")
        return price

    if edition == "v1":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "clean":  # the result changes, no step does

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return f"done, {price}"

    elif edition == "added":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("audit", note_of, price)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "removed":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            await opening(ctx, order)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "reordered":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.effect(send, {"to": order["to"]})
            await ctx.step("note", note_of, price)
            return "done"

    elif edition == "renamed":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("remark", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "payload":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"], "cc": "boss"})
            return "done"

    elif edition == "appended":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            await ctx.step("thanks", note_of, price)
            return "done"

    elif edition == "truncated":

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("note", note_of, price)
            return "done"

    elif edition == "patched":  # a fee step, only for runs that reach it with the patch

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            if ctx.patched("fee"):
                price = await ctx.step("fee", price_of, [price, 1])
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "patched-twice":  # one change on both sides of the wait

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price: int = await ctx.step("price", price_of, order["items"])
            await ctx.effect(hold, {"sku": order["sku"]})
            if ctx.patched("fee"):
                price = await ctx.step("fee", price_of, [price, 1])
            if order.get("wait"):
                await ctx.wait_for("go")
            if ctx.patched("fee"):
                await ctx.step("fee-note", note_of, price)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "repatched":  # the same branch behind another change id

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            if ctx.patched("discount"):
                price = await ctx.step("fee", price_of, [price, 1])
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "repriced":  # the first step renamed: no in-flight order replays

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price: int = await ctx.step("pricing", price_of, order["items"])
            await ctx.effect(hold, {"sku": order["sku"]})
            if order.get("wait"):
                await ctx.wait_for("go")
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    elif edition == "v2":  # v1 as it was, and a v2 that holds before it prices

        @register
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price = await opening(ctx, order)
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

        @made.registry.workflow(name="order", version=2, step_retry=QUICK)
        async def order_v2(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            await ctx.effect(hold, {"sku": order["sku"]})
            price = await ctx.step("price", price_of, order["items"])
            if order.get("wait"):
                await ctx.wait_for("go")
            await ctx.step("note", note_of, price)
            await ctx.effect(send, {"to": order["to"]})
            return "done v2"

    else:
        raise ValueError(edition)
    return made


ORDER = {"items": [3, 4], "sku": "A-1", "to": "ann@example.com"}


async def run_orders(url: str, registry: lf.Registry, **orders: dict[str, Any]) -> dict[str, str]:
    """Start one order per key and run a worker until nothing is due; the instance ids."""
    started = {}
    async with lf.Engine(url, registry) as engine:
        for key, order in orders.items():
            started[key] = (await engine.start("order", key=key, input=order)).instance_id
        await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
    return started
