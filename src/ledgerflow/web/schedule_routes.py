"""The API's schedule routes: list and show (viewer); pause, resume, delete and trigger
(operator), each through :class:`~ledgerflow.operators.schedules.ScheduleCommands` in the
principal's name and tenant, audited in the change's transaction (internal).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request
from fastapi.responses import Response
from pydantic import Field

from ledgerflow import limits
from ledgerflow.operators.schedules import schedule_json, slot_json
from ledgerflow.operators.service import ApiRole
from ledgerflow.operators.shapes import listing
from ledgerflow.web.declare import Outcome, Scoped, answer, api_route, api_router
from ledgerflow.web.models import Body, ListingOut, Record

router = api_router(tags=["schedules"])
NamePath = Annotated[str, Path(min_length=1, max_length=limits.NAME_LENGTH_MAX)]
Why = Annotated[str, Field(max_length=1000)]


class ScheduleChangeBody(Body):
    reason: Why = ""


class TriggerBody(Body):
    request_id: Annotated[str, Field(min_length=1, max_length=limits.EVENT_ID_LENGTH_MAX)] = Field(
        description="the trigger's id: sending it again is the same instance"
    )
    reason: Why = ""


@api_route(
    router, "GET", "/schedules", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="The schedules of the token's tenant: spec, next slot, paused",
)  # fmt: skip
def schedules(scoped: Scoped) -> Any:
    return listing([schedule_json(s) for s in scoped.schedules().every()])


@api_route(
    router, "GET", "/schedules/{name}", role=ApiRole.VIEWER, response_model=Record,
    errors=(404,), summary="A schedule and its latest decided slots, each with its reason",
)  # fmt: skip
def schedule(scoped: Scoped, name: NamePath) -> Any:
    view = scoped.schedules().show(name)
    return {**schedule_json(view.schedule), "slots": [slot_json(s) for s in view.slots]}


def _change(what: str) -> Any:
    def change(
        request: Request, scoped: Scoped, name: NamePath, body: ScheduleChangeBody
    ) -> Response:
        def carry_out() -> Outcome:
            changed = getattr(scoped.schedules(), what)(name, reason=body.reason)
            return 200, {"name": name, "outcome": "applied" if changed else "no-op"}

        return answer(request, carry_out)

    return change


for _what in ("pause", "resume", "delete"):
    api_route(
        router, "POST", f"/schedules/{{name}}/{_what}", role=ApiRole.OPERATOR,
        response_model=Record, errors=(404,), summary=f"{_what.capitalize()} a schedule (audited)",
    )(_change(_what))  # fmt: skip


@api_route(
    router, "POST", "/schedules/{name}/trigger", role=ApiRole.OPERATOR, response_model=Record,
    errors=(404,), summary="Start the schedule's workflow now under the trigger's own key",
)  # fmt: skip
def trigger(request: Request, scoped: Scoped, name: NamePath, body: TriggerBody) -> Response:
    def carry_out() -> Outcome:
        started = scoped.schedules().trigger(name, request_id=body.request_id, reason=body.reason)
        instance = started.instance
        out = {"instance_id": instance.instance_id, "business_key": instance.business_key,
               "created": started.new}  # fmt: skip
        return (201 if started.new else 200), out

    return answer(request, carry_out)
