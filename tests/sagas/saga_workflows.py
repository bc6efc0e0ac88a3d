"""The saga tests' workflows: the classic trip booking and an order with a payment pivot.

Imported by the worker subprocesses as ``saga_workflows:registry``; the participants live in
the service process whose URL comes from ``LEDGERFLOW_TEST_SERVICE_URL``. The participants'
promises are mixed on purpose, so compensations recovered after a crash are settled both by a
lookup and by re-sending the same key to a deduplicating participant.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Participant, Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=20))
# The cast the service hosts, each with its promises: both ways of settling an UNKNOWN occur.
PARTICIPANTS = (
    "flight:lookup",
    "hotel:dedupe",
    "car:dedupe+lookup",
    "inventory:lookup",
    "payment:dedupe",
    "shipping:dedupe+lookup",
    "email:dedupe",
)

registry = Registry()


def _booking(spec: str, *, preconditions: bool) -> Participant:
    return declare(
        registry,
        spec,
        operations={"book": "compensatable"},
        compensations={"book": "cancel"},
        preconditions=preconditions,
        retry=FAST,
    )


flight = _booking("flight:lookup", preconditions=True)
hotel = _booking("hotel:dedupe", preconditions=False)
car = _booking("car:dedupe+lookup", preconditions=True)

inventory = declare(
    registry,
    "inventory:lookup",
    operations={"reserve": "compensatable"},
    compensations={"reserve": "release"},
    preconditions=True,
    retry=FAST,
)
# The pivot: once a charge is confirmed the order may only go forward.
payment = declare(
    registry, "payment:dedupe", operations={"charge": "forward-recovery-only"}, retry=FAST
)
shipping = declare(
    registry,
    "shipping:dedupe+lookup",
    operations={"ship": "compensatable"},
    compensations={"ship": "cancel_shipment"},
    retry=FAST,
)
email = declare(registry, "email:dedupe", operations={"send": "forward-recovery-only"}, retry=FAST)

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
