"""A payment workflow whose participant changed its contract, for the contract-version tests.

``payments(contract)`` builds a registry whose ``bank.charge`` declares that contract version:
under contract 1 its payload is ``{"amount": n}``, under contract 2 ``{"amount_cents": n}``.
``pay`` v1 sends the contract-1 shape and, in a registry of contract 2, ``pay`` v2 sends the
new one. Journal positions: 1 local ``price``, 2 effect ``bank.charge``, 3 a wait for ``go``,
4 local ``receipt``. The participant records every call it receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import ledgerflow as lf

QUICK = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=1))
ORDER = {"items": [3, 4]}


def price_of(items: list[int]) -> int:
    return sum(items)


def receipt_of(amount: int) -> str:
    return f"charged {amount}"


@dataclass
class Payments:
    registry: lf.Registry
    calls: list[str] = field(default_factory=list)


def payments(contract: int) -> Payments:
    made = Payments(registry=lf.Registry())
    bank = made.registry.add_participant(lf.Participant("bank", deduplicates=True))

    @bank.effect(classification="reversible", retry=QUICK, contract_version=contract)
    async def charge(call: lf.EffectCall) -> dict[str, Any]:
        made.calls.append(f"charge {call.idempotency_key}")
        return {"charged": call.payload}

    @made.registry.workflow(name="pay", version=1, step_retry=QUICK)
    async def pay(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
        price: int = await ctx.step("price", price_of, order["items"])
        await ctx.effect(charge, {"amount": price})
        await ctx.wait_for("go")
        return str(await ctx.step("receipt", receipt_of, price))

    if contract == 2:

        @made.registry.workflow(name="pay", version=2, step_retry=QUICK)
        async def pay_v2(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            price: int = await ctx.step("price", price_of, order["items"])
            await ctx.effect(charge, {"amount_cents": price})
            await ctx.wait_for("go")
            return str(await ctx.step("receipt", receipt_of, price))

    return made


# For the command line: the code as it is after the participant's contract changed.
registry = payments(2).registry
