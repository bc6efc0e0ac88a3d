"""The workflow ``ledgerflow worker --processes N`` runs in the supervisor's tests.

Imported by each worker process as ``supervised_workflows:registry``; the participants live in
the test's service process (``processes.running_service``), which keeps its own record of every
application by key: the record the tests read to see each effect applied once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=6, backoff_initial=timedelta(milliseconds=20))
# Inventory answers lookups but does not deduplicate: after a kill, the engine must ask before
# sending again. Payment deduplicates by key.
PARTICIPANTS = ("inventory:lookup", "payment:dedupe")

registry = Registry()
inventory = declare(registry, "inventory:lookup", operations={"reserve": "reversible"}, retry=FAST)
payment = declare(registry, "payment:dedupe", operations={"charge": "compensatable"}, retry=FAST)


def total_of(n: int) -> int:
    return 100 + n


@registry.workflow(name="order", version=1)
async def order(ctx: WorkflowContext, n: int) -> dict[str, Any]:
    total = await ctx.step("total", total_of, n)
    reservation = await ctx.effect(inventory.effects["reserve"], {"n": n})
    charge = await ctx.effect(payment.effects["charge"], {"n": n, "amount": total})
    return {"total": total, "reservation": reservation, "charge": charge}
