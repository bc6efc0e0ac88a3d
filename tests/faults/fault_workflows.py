"""Workflows the crash-point tests run in real worker processes.

Imported by the worker subprocess as ``fault_workflows:registry``; the participants live in a
separate service process whose URL comes from ``LEDGERFLOW_TEST_SERVICE_URL`` (see
``remote_cast``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=20))
# The cast the service hosts: the three ways an UNKNOWN outcome is settled.
PARTICIPANTS = ("inventory:lookup", "payment:dedupe", "legacy:none")

registry = Registry()
# Has a lookup, does not deduplicate: UNKNOWN is settled by asking it.
inventory = declare(registry, "inventory:lookup", operations={"reserve": "reversible"}, retry=FAST)
# Deduplicates, has no lookup: UNKNOWN is settled by sending the same key again.
payment = declare(registry, "payment:dedupe", operations={"charge": "compensatable"}, retry=FAST)
# Neither: UNKNOWN can only be settled by an operator.
legacy = declare(registry, "legacy:none", operations={"apply": "compensatable"}, retry=FAST)


def total_of(items: list[int]) -> int:
    return sum(items)


@registry.workflow(name="order", version=1)
async def order(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    total = await ctx.step("total", total_of, request["items"])
    reservation = await ctx.effect(inventory.effects["reserve"], {"sku": request["sku"]})
    charge = await ctx.effect(payment.effects["charge"], {"amount": total})
    return {"total": total, "reservation": reservation, "charge": charge}


@registry.workflow(name="legacy", version=1)
async def legacy_flow(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    receipt = await ctx.effect(legacy.effects["apply"], request)
    return {"receipt": receipt}
