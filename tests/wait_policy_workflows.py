"""Parents whose children are started with ``on_parent_end="wait"`` and that then fail, are
cancelled or break, for the tests of that policy on every ending of the parent
(``wait_policy_workflows:registry``: this folder is on a worker process's path)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import ledgerflow as lf

registry = lf.Registry()
# What the bank applied, by idempotency key (in the process that ran the effect).
applied: Counter[str] = Counter()
bank = registry.add_participant(lf.Participant("bank", deduplicates=True))


class Refused(lf.BusinessFailure):
    """The parent's declared failure, once its child is started."""


@bank.effect(classification="compensatable", compensation="refund")
async def charge(call: lf.EffectCall) -> str:
    applied[call.idempotency_key] += 1
    return "charged"


@bank.compensation("refund")
async def refund(call: lf.EffectCall) -> str:
    applied[call.idempotency_key] += 1
    return "refunded"


@registry.workflow(name="hold", version=1)
async def hold(ctx: lf.WorkflowContext, _: Any) -> str:
    await ctx.wait_for("release")
    return "released"


@registry.workflow(name="fails", version=1)
async def fails(ctx: lf.WorkflowContext, charged: bool) -> None:
    """Start a "wait" child, then fail: FAILED, or COMPENSATED when it charged first."""
    if charged:
        await ctx.effect(charge, 10)
    await ctx.start_child(hold, None, on_parent_end="wait")
    raise Refused("refused after starting its child")


@registry.workflow(name="waits", version=1)
async def waits(ctx: lf.WorkflowContext, _: Any) -> str:
    """Start a "wait" child, then wait for a signal (cancelled there)."""
    await ctx.start_child(hold, None, on_parent_end="wait")
    await ctx.wait_for("finish")
    return "finished"


@registry.workflow(name="breaks", version=1, defect_retry=lf.RetryPolicy(attempts_max=1))
async def breaks(ctx: lf.WorkflowContext, _: Any) -> None:
    """Start a "wait" child, then hit a defect: parked, no ending."""
    await ctx.start_child(hold, None, on_parent_end="wait")
    raise ZeroDivisionError("a defect, after the child started")
