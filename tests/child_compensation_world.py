"""A parent that books a child and then fails, so its saga undoes the child with a
compensating workflow: the registry the child-compensation kill test's worker processes serve
(``ledgerflow worker child_compensation_world:registry``)."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf

registry = lf.Registry()


class NoFlight(lf.BusinessFailure):
    """The parent's failure after its child succeeded."""


@registry.workflow(name="book", version=1)
async def book(ctx: lf.WorkflowContext, nights: int) -> dict[str, Any]:
    return {"booking": f"H-{nights}"}


@registry.workflow(name="unbook", version=1)
async def unbook(ctx: lf.WorkflowContext, booked: dict[str, Any]) -> str:
    return f"cancelled {booked['result']['booking']}"


@registry.workflow(name="trip", version=1)
async def trip(ctx: lf.WorkflowContext, nights: int) -> None:
    await ctx.child(book, nights, compensate_with=unbook)
    raise NoFlight("no seat left")
