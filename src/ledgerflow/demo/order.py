"""The demo's order workflow: one order across four remote participants with different promises.

This module owns the workflow ``ledgerflow demo`` runs (``ledgerflow.demo.order:registry``) and
the participants it declares. The four participants are chosen so that every way of settling an
UNKNOWN effect shows up in one order:

- inventory ``reserve`` (reversible, undone by ``release``): has a lookup, does not
  deduplicate, so a doubt is settled by asking it, never by sending the key again;
- payment ``charge`` (compensatable, undone by ``refund``): deduplicates, has no lookup, so a
  doubt is settled by sending the same key again and taking the first receipt back;
- shipping ``ship`` (forward-recovery-only, the pivot): deduplicates and has a lookup;
- email ``send_confirmation`` (forward-recovery-only): deduplicates.

A failure before the shipment (the pivot) releases the stock and refunds the payment; after it,
the instance needs forward recovery and nothing is undone.

The participants live in another process (:mod:`ledgerflow.demo.service`), whose URL is read
from ``LEDGERFLOW_DEMO_SERVICE_URL`` when this module is imported: the demo sets it for the
worker processes it starts. The URL is not part of any workflow fingerprint, so a process that
only starts instances may import this module without it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from ledgerflow import Participant, Registry, RetryPolicy, WorkflowContext
from ledgerflow.participant import remote_participant

SERVICE_URL_ENVIRONMENT_VARIABLE = "LEDGERFLOW_DEMO_SERVICE_URL"
# Port 9 (discard) is never a participant service: a dispatch without the variable set fails
# with no proof either way, which the engine records as UNKNOWN rather than as anything else.
SERVICE_URL = os.environ.get(SERVICE_URL_ENVIRONMENT_VARIABLE, "http://127.0.0.1:9")

# The demo must finish in seconds, so retries start quickly; the attempt limit leaves room for
# one crash-and-resend per effect plus a spare.
DEMO_RETRY = RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=50))
DEMO_TIMEOUT_SECONDS = 5.0

# The flags the participant service must be started with so that it keeps the promises
# declared below (``--participant NAME:FLAGS``).
SERVICE_PARTICIPANTS = (
    "inventory:lookup",
    "payment:dedupe",
    "shipping:dedupe+lookup",
    "email:dedupe",
)

registry = Registry()


def _served(
    name: str,
    operation: str,
    classification: str,
    *,
    deduplicates: bool,
    has_lookup: bool,
    compensation: str | None = None,
) -> Participant:
    """One of the participant service's participants, at ``SERVICE_URL`` with the demo's
    timeout and retries: one operation, and the compensation that undoes it (if any)."""
    participant = remote_participant(
        name,
        SERVICE_URL,
        operations={operation: classification},
        compensations={operation: compensation} if compensation else None,
        deduplicates=deduplicates,
        has_lookup=has_lookup,
        timeout_seconds=DEMO_TIMEOUT_SECONDS,
        retry=DEMO_RETRY,
    )
    return registry.add_participant(participant)


# As SERVICE_PARTICIPANTS starts them (dedupe, lookup).
inventory = _served(
    "inventory", "reserve", "reversible", compensation="release",
    deduplicates=False, has_lookup=True,
)  # fmt: skip
payment = _served(
    "payment", "charge", "compensatable", compensation="refund",
    deduplicates=True, has_lookup=False,
)  # fmt: skip
shipping = _served("shipping", "ship", "forward-recovery-only", deduplicates=True, has_lookup=True)
email = _served(
    "email", "send_confirmation", "forward-recovery-only", deduplicates=True, has_lookup=False
)


def order_total(items: list[dict[str, Any]]) -> int:
    """The order's amount in cents (integers, so the journaled total never rounds)."""
    return sum(int(item["quantity"]) * int(item["unit_price_cents"]) for item in items)


def sample_order(number: int) -> dict[str, Any]:
    """A deterministic order input for the n-th demo order."""
    return {
        "customer": f"customer-{number}@example.com",
        "address": f"{number} Ledger Lane, Flowtown",
        "currency": "EUR",
        "items": [
            {"sku": f"SKU-{number:03d}", "quantity": number, "unit_price_cents": 1250},
            {"sku": "SKU-GIFTWRAP", "quantity": 1, "unit_price_cents": 300},
        ],
    }


@registry.workflow(
    name="order", version=1, schema="order-v1", examples=[sample_order(1), sample_order(2)]
)
async def order(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    """Reserve, charge, ship, confirm: the shipment is the pivot, after it only forward."""
    items = request["items"]
    total = await ctx.step("total", order_total, items)
    lines = [{"sku": item["sku"], "quantity": item["quantity"]} for item in items]
    reservation = await ctx.effect(
        inventory.effects["reserve"], {"order": ctx.business_key, "lines": lines}
    )
    charge = await ctx.effect(
        payment.effects["charge"],
        {"order": ctx.business_key, "amount_cents": total, "currency": request["currency"]},
    )
    shipment = await ctx.effect(
        shipping.effects["ship"],
        {"order": ctx.business_key, "address": request["address"], "lines": lines},
    )
    confirmation = await ctx.effect(
        email.effects["send_confirmation"],
        {"order": ctx.business_key, "to": request["customer"], "amount_cents": total},
    )
    return {
        "order": ctx.business_key,
        "total_cents": total,
        "currency": request["currency"],
        "reservation": reservation,
        "charge": charge,
        "shipment": shipment,
        "confirmation": confirmation,
    }
