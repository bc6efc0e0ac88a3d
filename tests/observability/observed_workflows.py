"""Workflows the observability tests run in real worker processes.

Imported by the worker subprocesses as ``observed_workflows:registry``; the participants live
in the service process whose URL comes from ``LEDGERFLOW_TEST_SERVICE_URL``. Each workflow is
one of the paths an on-call engineer must see: an answer lost with its worker and settled by
a lookup, an UNKNOWN outcome only a person can settle (a park), a compensation, a step that
fails once and is retried, and an effect its participant refuses for good.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=20))
ONCE = RetryPolicy(attempts_max=1)
PARTICIPANTS = ("inventory:lookup", "payment:dedupe", "legacy:none", "books:dedupe")

registry = Registry()
# A lookup: an UNKNOWN reservation is settled by asking.
inventory = declare(registry, "inventory:lookup", operations={"reserve": "reversible"}, retry=FAST)
# Deduplicates; its charge has a refund that undoes it.
payment = declare(
    registry,
    "payment:dedupe",
    operations={"charge": "compensatable"},
    compensations={"charge": "refund"},
    retry=FAST,
)
# Neither lookup nor deduplication: an UNKNOWN outcome goes to a person.
legacy = declare(registry, "legacy:none", operations={"apply": "compensatable"}, retry=FAST)
# Refuses a posting for good when the test says so.
books = declare(registry, "books:dedupe", operations={"post": "compensatable"}, retry=FAST)


@registry.workflow(name="reserve", version=1)
async def reserve(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    return {"reservation": await ctx.effect(inventory.effects["reserve"], request)}


@registry.workflow(name="legacy", version=1)
async def legacy_flow(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    return {"receipt": await ctx.effect(legacy.effects["apply"], request)}


def check_stock(sku: str) -> None:
    raise ValueError(f"{sku} is out of stock")


# Out of stock is refunded's declared business failure: the charge is compensated.
@registry.workflow(name="refunded", version=1, business_failures=(ValueError,))
async def refunded(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    charge = await ctx.effect(payment.effects["charge"], {"amount": request["amount"]})
    await ctx.step("check_stock", check_stock, request["sku"], retry=ONCE)
    return {"charge": charge}


# Calls of flaky_count in this worker process: the first one fails, the retry succeeds.
_CALLS = {"count": 0}


def flaky_count(n: int) -> int:
    _CALLS["count"] += 1
    if _CALLS["count"] == 1:
        raise ConnectionError("the counter service blinked")
    return n + 1


@registry.workflow(name="flaky", version=1)
async def flaky(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.step("count", flaky_count, n, retry=FAST))


@registry.workflow(name="posted", version=1)
async def posted(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    return {"posting": await ctx.effect(books.effects["post"], request)}
