"""The saga tests' workflows: the classic trip booking and an order with a payment pivot.

Imported by the worker subprocesses as ``saga_workflows:registry``; the participants live in
the service process whose URL comes from ``LEDGERFLOW_TEST_SERVICE_URL``. The participants'
promises are mixed on purpose, so compensations recovered after a crash are settled both by a
lookup and by re-sending the same key to a deduplicating participant.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from ledgerflow import Participant, Registry, RetryPolicy, WorkflowContext
from ledgerflow.participant import remote_participant

URL = os.environ.get("LEDGERFLOW_TEST_SERVICE_URL", "http://127.0.0.1:9")
FAST = RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=20))

registry = Registry()


def _booking(
    name: str, *, deduplicates: bool, has_lookup: bool, preconditions: bool
) -> Participant:
    return registry.add_participant(
        remote_participant(
            name,
            URL,
            operations={"book": "compensatable"},
            compensations={"book": "cancel"},
            preconditions=preconditions,
            deduplicates=deduplicates,
            has_lookup=has_lookup,
            retry=FAST,
        )
    )


flight = _booking("flight", deduplicates=False, has_lookup=True, preconditions=True)
hotel = _booking("hotel", deduplicates=True, has_lookup=False, preconditions=False)
car = _booking("car", deduplicates=True, has_lookup=True, preconditions=True)

inventory = registry.add_participant(
    remote_participant(
        "inventory",
        URL,
        operations={"reserve": "compensatable"},
        compensations={"reserve": "release"},
        preconditions=True,
        deduplicates=False,
        has_lookup=True,
        retry=FAST,
    )
)
# The pivot: once a charge is confirmed the order may only go forward.
payment = registry.add_participant(
    remote_participant(
        "payment",
        URL,
        operations={"charge": "forward-recovery-only"},
        deduplicates=True,
        has_lookup=False,
        retry=FAST,
    )
)
shipping = registry.add_participant(
    remote_participant(
        "shipping",
        URL,
        operations={"ship": "compensatable"},
        compensations={"ship": "cancel_shipment"},
        deduplicates=True,
        has_lookup=True,
        retry=FAST,
    )
)
email = registry.add_participant(
    remote_participant(
        "email",
        URL,
        operations={"send": "forward-recovery-only"},
        deduplicates=True,
        has_lookup=False,
        retry=FAST,
    )
)

TRIP = {"traveller": "ada", "flight": "LF 101", "hotel": "Harbour", "car": "compact"}
ORDER = {"sku": "A-1", "quantity": 2, "amount": 40, "address": "1 Quay St", "to": "ada@x.test"}


@registry.workflow(name="trip", version=1, examples=(TRIP,))
async def trip(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    who = request["traveller"]
    seat = await ctx.effect(flight.effects["book"], {"traveller": who, "flight": request["flight"]})
    room = await ctx.effect(hotel.effects["book"], {"traveller": who, "hotel": request["hotel"]})
    ride = await ctx.effect(car.effects["book"], {"traveller": who, "car": request["car"]})
    return {"flight": seat, "hotel": room, "car": ride}


@registry.workflow(name="order", version=1, examples=(ORDER,))
async def order(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    stock = {"sku": request["sku"], "quantity": request["quantity"]}
    reservation = await ctx.effect(inventory.effects["reserve"], stock)
    charge = await ctx.effect(payment.effects["charge"], {"amount": request["amount"]})
    shipment = await ctx.effect(shipping.effects["ship"], {"address": request["address"]})
    await ctx.effect(email.effects["send"], {"to": request["to"], "shipment": shipment})
    return {"reservation": reservation, "charge": charge, "shipment": shipment}
