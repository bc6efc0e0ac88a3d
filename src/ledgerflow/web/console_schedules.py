"""The console's schedules: the list, one schedule with its latest decided slots (each with
its outcome and reason), and the operator's forms to pause, resume or trigger it (internal).

Each form is the API's change (:class:`~ledgerflow.operators.schedules.ScheduleCommands` in the
signed-in principal's name and tenant, audited in the change's transaction); the forms are
offered only to a role that holds them, and the commands still decide every request.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Path, Request
from fastapi.responses import RedirectResponse, Response

from ledgerflow import limits
from ledgerflow.model.schedule import iso_utc
from ledgerflow.operators.service import ApiRole
from ledgerflow.web.console_session import (
    CONSOLE_PATH,
    FormSession,
    checked_form,
    render,
    scoped,
    signed_in,
)
from ledgerflow.web.console_views import when
from ledgerflow.web.declare import CheckedRoute

router = APIRouter(
    prefix=CONSOLE_PATH,
    include_in_schema=False,
    route_class=CheckedRoute,
    dependencies=[Depends(checked_form)],
)
Name = Annotated[str, Path(min_length=1, max_length=limits.NAME_LENGTH_MAX)]
Reason = Annotated[str, Form(max_length=1000)]
CHANGES = ("pause", "resume")


@router.get("/schedules")
def schedules(request: Request) -> Response:
    session = signed_in(request)
    every = scoped(request, session).schedules().every()
    return render(request, "schedules.html", session=session, schedules=every, iso=iso_utc)


@router.get("/schedules/{name}")
def schedule(request: Request, name: Name, done: str | None = None) -> Response:
    session = signed_in(request)
    view = scoped(request, session).schedules().show(name)
    return render(
        request, "schedule.html", session=session, view=view, spec=view.schedule.parsed,
        iso=iso_utc, when=when, done=done if done in (*CHANGES, "trigger") else None,
        operator=session.principal.role.allows(ApiRole.OPERATOR),
    )  # fmt: skip


def _back(name: str, done: str) -> Response:
    return RedirectResponse(
        f"{CONSOLE_PATH}/schedules/{quote(name, safe='')}?done={done}", status_code=303
    )


@router.post("/schedules/{name}/pause")
def pause(request: Request, name: Name, session: FormSession, reason: Reason = "") -> Response:
    scoped(request, session).schedules().pause(name, reason=reason)
    return _back(name, "pause")


@router.post("/schedules/{name}/resume")
def resume(request: Request, name: Name, session: FormSession, reason: Reason = "") -> Response:
    scoped(request, session).schedules().resume(name, reason=reason)
    return _back(name, "resume")


@router.post("/schedules/{name}/trigger")
def trigger(
    request: Request,
    name: Name,
    session: FormSession,
    request_id: Annotated[str, Form(min_length=1, max_length=limits.EVENT_ID_LENGTH_MAX)],
    reason: Reason = "",
) -> Response:
    """A manual trigger under its own key (never a slot's): sending the same request id
    again is the same instance, so a form sent twice starts one."""
    started = (
        scoped(request, session).schedules().trigger(name, request_id=request_id, reason=reason)
    )
    return RedirectResponse(
        f"{CONSOLE_PATH}/instances/{quote(started.instance.instance_id, safe='')}",
        status_code=303,
    )
