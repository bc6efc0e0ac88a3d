"""The reconciliation tests' cast: two participants served over HTTP, both with a lookup.

``inventory`` (reserve) and ``shipping`` (ship) live in a participant service process, each with
its own SQLite ledger; neither deduplicates, so a lost reply is settled only by asking the
lookup. Worker processes import ``reconcile_workflows:registry`` with the service's URL in
``LEDGERFLOW_TEST_SERVICE_URL``; a test builds its own copy with :func:`build_registry` once
it knows the URL.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare, service_url

FAST = RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=20))
# A lookup that cannot reach the service is asked twice, quickly, before the doubt is parked for
# a person: the tests park an instance by keeping the service down through both asks.
ASK_TWICE = RetryPolicy(attempts_max=2, backoff_initial=timedelta(milliseconds=20))
# The cast the service hosts: both can be asked, neither deduplicates.
PARTICIPANTS = ("inventory:lookup", "shipping:lookup")


def build_registry(url: str) -> Registry:
    registry = Registry()
    options: dict[str, Any] = {"url": url, "retry": FAST, "timeout_seconds": 5.0}
    inventory = declare(
        registry,
        "inventory:lookup",
        operations={"reserve": "reversible"},
        lookup_retry=ASK_TWICE,
        **options,
    )
    shipping = declare(
        registry,
        "shipping:lookup",
        operations={"ship": "forward-recovery-only"},
        lookup_retry=ASK_TWICE,
        **options,
    )

    @registry.workflow(name="order", version=1)
    async def order(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
        reservation = await ctx.effect(inventory.effects["reserve"], {"sku": request["sku"]})
        shipment = await ctx.effect(shipping.effects["ship"], {"sku": request["sku"]})
        return {"reservation": reservation, "shipment": shipment}

    return registry


registry = build_registry(service_url())
