"""The traces' tests' workflows, over a participant at a URL (``traced_participant``); this
module imports nothing of OpenTelemetry, so a process without it can run them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import ledgerflow as lf
from ledgerflow.participant import remote_participant

FAST = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=5))
ONCE = lf.RetryPolicy(attempts_max=1)


def add(n: int) -> int:
    return n + 1


def out_of_stock(sku: str) -> None:
    raise ValueError(f"{sku} is out of stock")


def build(url: str) -> lf.Registry:
    registry = lf.Registry()
    bank = registry.add_participant(
        remote_participant(
            "bank",
            url,
            operations={"charge": "compensatable"},
            compensations={"charge": "refund"},
            deduplicates=False,
            has_lookup=True,
            retry=FAST,
        )
    )

    @registry.workflow(name="pay", version=1)
    async def pay(ctx: lf.WorkflowContext, n: int) -> Any:
        first = await ctx.step("one", add, n)
        receipt = await ctx.effect(bank.effects["charge"], {"amount": first})
        await ctx.step("two", add, first)
        return receipt

    # Out of stock is refund's declared business failure: the charge is compensated.
    @registry.workflow(name="refund", version=1, business_failures=(ValueError,))
    async def refund(ctx: lf.WorkflowContext, _: None) -> None:
        await ctx.wait_for("go")
        await ctx.effect(bank.effects["charge"], {"amount": 3})
        await ctx.step("stock", out_of_stock, "A-1", retry=ONCE)

    return registry
