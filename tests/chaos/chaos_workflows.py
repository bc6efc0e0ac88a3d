"""The order workflow the chaos tests run in real worker processes.

Imported by each worker subprocess as ``chaos_workflows:registry``; the participants live in a
separate service process whose URL comes from ``LEDGERFLOW_TEST_SERVICE_URL``. Retry policies
are generous: workers die and PostgreSQL restarts under these workflows, and every order must
still succeed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

GENEROUS = RetryPolicy(
    attempts_max=50,
    backoff_initial=timedelta(milliseconds=50),
    backoff_multiplier=2.0,
    backoff_max=timedelta(seconds=1),
)

# The cast the service process must host (``--participant`` specs).
PARTICIPANTS = ["inventory:lookup", "payment:dedupe", "shipping:dedupe+lookup"]

registry = Registry()
# Has a lookup, does not deduplicate: UNKNOWN is settled by asking it.
inventory = declare(
    registry, "inventory:lookup", operations={"reserve": "reversible"}, retry=GENEROUS
)
# Deduplicates, has no lookup: UNKNOWN is settled by sending the same key again.
payment = declare(
    registry, "payment:dedupe", operations={"charge": "compensatable"}, retry=GENEROUS
)
# Both: deduplicates and can be asked.
shipping = declare(
    registry, "shipping:dedupe+lookup", operations={"ship": "compensatable"}, retry=GENEROUS
)


def total_of(items: list[int]) -> int:
    return sum(items)


@registry.workflow(name="order", version=1)
async def order(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    total = await ctx.step("total", total_of, request["items"])
    reservation = await ctx.effect(inventory.effects["reserve"], {"sku": request["sku"]})
    charge = await ctx.effect(payment.effects["charge"], {"amount": total})
    shipment = await ctx.effect(shipping.effects["ship"], {"order": request["order"]})
    return {"total": total, "reservation": reservation, "charge": charge, "shipment": shipment}
