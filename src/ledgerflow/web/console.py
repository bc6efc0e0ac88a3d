"""The operator console: server-rendered pages over the operators' service (internal).

Pages (under ``/console``): the home page (counts by status, the consistency signals, the last
day's activity), the instance list with its search, an instance with every ledger (input and
result, its timeline drawn and listed, steps, effects with their keys and evidence, UNKNOWN
outcomes highlighted, compensations, inbox, flags, audit) and the forms its state and the
principal's role allow (signal or approve, cancel, repair: :mod:`ledgerflow.web.console_offers`),
the attention queue, the audit log, the versions and workers, the held locks, the schedules
(:mod:`ledgerflow.web.console_schedules`). Repairs are two
steps: a dry run shown as a diff of the ledger, then apply on confirmation, only if the
instance is still at the generation the diff was made from. A signal is the API's (the same
call, role check, audit and deduplication by event id).

No script runs in these pages: plain links and forms, one stylesheet shipped in the package,
nothing fetched from elsewhere. Sessions, CSRF and escaping are
:mod:`ledgerflow.web.console_session`'s.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from ledgerflow import InstanceStatus, limits
from ledgerflow.errors import LedgerflowError, PayloadError
from ledgerflow.model.ids import InstanceId
from ledgerflow.operators.service import (
    Delivery,
    InstanceQuery,
    RepairKind,
    RepairRequest,
    RepairResult,
    ScopedOperations,
    SignedIn,
)
from ledgerflow.operators.shapes import decoded
from ledgerflow.web import console_schedules
from ledgerflow.web.activity_chart import GROUPS, activity
from ledgerflow.web.console_offers import NEEDS_STEP, offers
from ledgerflow.web.console_session import (
    CONSOLE_PATH,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    STATIC_PATH,
    FormSession,
    SignInRequiredError,
    checked_form,
    render,
    scoped,
    secure_cookies,
    set_session,
    sign_in_redirect,
    signed_in,
)
from ledgerflow.web.console_views import (
    age,
    distinct_cause,
    form_choice,
    form_int,
    form_json,
    form_moment,
    instance_view,
    plan_diff,
    pretty,
    timeline_chart,
    when,
)
from ledgerflow.web.declare import CheckedRoute, server_of
from ledgerflow.web.instance_routes import refused_problem

router = APIRouter(
    prefix=CONSOLE_PATH,
    include_in_schema=False,
    route_class=CheckedRoute,
    dependencies=[Depends(checked_form)],
)
STATIC = Path(__file__).parent / "static"
Field = Annotated[str | None, Form(max_length=limits.PAYLOAD_BYTES_MAX)]
PAGE = limits.PAGE_SIZE_DEFAULT


def is_console(request: Request) -> bool:
    return request.url.path == CONSOLE_PATH or request.url.path.startswith(CONSOLE_PATH + "/")


def error_page(request: Request, status: int, problem: dict[str, Any]) -> Response:
    """A console error as a page that keeps the nav bar (for whoever is signed in) and links
    back to where the person came from: the instance a refused form was about, else the
    list."""
    if status == 401:
        return sign_in_redirect()
    try:
        session: SignedIn | None = signed_in(request)
    except SignInRequiredError:
        session = None
    found = _FORM_OF_INSTANCE.match(request.url.path)
    back = (f"{CONSOLE_PATH}/instances/{found.group(1)}", "Back to the instance") if found else (
        f"{CONSOLE_PATH}/instances", "Back to the instances"
    )  # fmt: skip
    return render(request, "error.html", status=status, problem=problem, session=session, back=back)


# A form's route under an instance (its page is the path up to the id).
_FORM_OF_INSTANCE = re.compile(rf"^{CONSOLE_PATH}/instances/([^/]+)/.+")


def _page(request: Request, name: str, **context: Any) -> Response:
    session = signed_in(request)
    return render(request, name, session=session, **context)


# -- sign-in ---------------------------------------------------------------------------------


@router.get("/sign-in")
def sign_in_form(request: Request, failed: bool = False) -> Response:
    token = secrets.token_urlsafe(32)
    response = render(request, "sign_in.html", session=None, csrf=token, failed=failed)
    response.set_cookie(
        SIGN_IN_COOKIE, token, httponly=True, samesite="strict", secure=secure_cookies(request),
        path=CONSOLE_PATH,
    )  # fmt: skip
    return response


@router.post("/sign-in")
def sign_in(
    request: Request,
    token: Annotated[str | None, Form(max_length=200)] = None,
    csrf: Annotated[str | None, Form(max_length=200)] = None,
) -> Response:
    # A field missing reads as a wrong one: back to the form, nobody signed in.
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    if not expected or not csrf or not hmac.compare_digest(expected, csrf):
        return RedirectResponse(f"{CONSOLE_PATH}/sign-in?failed=true", status_code=303)
    tokens = server_of(request).operations.tokens()
    try:
        cookie, _ = tokens.sign_in((token or "").strip())
    except LedgerflowError:
        return RedirectResponse(f"{CONSOLE_PATH}/sign-in?failed=true", status_code=303)
    # Signing in ends the session this browser held (whoever's): its row goes, so the old
    # cookie, wherever a copy of it is, signs nobody in any more.
    previous = request.cookies.get(SESSION_COOKIE)
    if previous:
        tokens.sign_out(previous)
    response = RedirectResponse(CONSOLE_PATH, status_code=303)
    set_session(response, request, cookie)
    return _forgetting(SIGN_IN_COOKIE, response, request)


def _forgetting(cookie: str, response: Response, request: Request) -> Response:
    """``response``, telling the browser to drop ``cookie`` (set as the console sets it)."""
    response.delete_cookie(
        cookie, path=CONSOLE_PATH, secure=secure_cookies(request), httponly=True,
        samesite="strict",
    )  # fmt: skip
    return response


@router.post("/sign-out")
def sign_out(request: Request, session: FormSession) -> Response:
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        server_of(request).operations.tokens().sign_out(cookie)
    response = sign_in_redirect()
    return _forgetting(SESSION_COOKIE, response, request)


# -- pages -----------------------------------------------------------------------------------


@router.get("")
def home(request: Request) -> Response:
    """The home page: counts by status, the consistency signals, the last day's activity."""
    session = signed_in(request)
    board = scoped(request, session).dashboard()
    return _page(
        request,
        "home.html",
        board=board,
        statuses=[s for s in InstanceStatus if board.statuses.get(s)],
        chart=activity(board.started, buckets=board.buckets, bucket_seconds=board.bucket_seconds),
        groups=list(GROUPS),
        age=age,
        when=when,
    )


@router.get("/instances")
def instances(
    request: Request,
    workflow: Annotated[str | None, Query(max_length=limits.NAME_LENGTH_MAX)] = None,
    version: Annotated[str | None, Query(max_length=10)] = None,
    status: Annotated[str | None, Query(max_length=40)] = None,
    tenant: Annotated[str | None, Query(max_length=limits.TENANT_LENGTH_MAX)] = None,
    key_prefix: Annotated[str | None, Query(max_length=limits.BUSINESS_KEY_LENGTH_MAX)] = None,
    flagged: Annotated[str | None, Query(pattern="^(|yes|no)$")] = None,
    reason: Annotated[str | None, Query(max_length=limits.NAME_LENGTH_MAX)] = None,
    created_from: Annotated[str | None, Query(max_length=40)] = None,
    created_until: Annotated[str | None, Query(max_length=40)] = None,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
) -> Response:
    """The instance list: every filter the API's listing has, a page at a time; the "Older"
    link carries the filters on with the cursor."""
    session = signed_in(request)
    ops = scoped(request, session)
    chosen = InstanceStatus(status) if status in {s.value for s in InstanceStatus} else None
    # Only a principal of every tenant chooses one; another's listing is its own tenant's.
    every_tenant = session.principal.tenant_filter is None
    query = InstanceQuery(
        workflow_name=workflow or None,
        workflow_version=form_int(version or "", "version"),
        status=chosen.value if chosen else None,
        tenant=(tenant or None) if every_tenant else None,
        key_prefix=key_prefix or None,
        flagged={"yes": True, "no": False}.get(flagged or ""),
        reason_code=reason or None,
        created_from=form_moment(created_from or "", "created from"),
        created_until=form_moment(created_until or "", "created until"),
        limit=limits.PAGE_SIZE_DEFAULT,
    )
    page = ops.page(query, cursor=cursor or None)
    filters = {
        "workflow": workflow or "",
        "version": version or "",
        "status": chosen.value if chosen else "",
        "tenant": (tenant or "") if every_tenant else "",
        "key_prefix": key_prefix or "",
        "flagged": flagged or "",
        "reason": reason or "",
        "created_from": created_from or "",
        "created_until": created_until or "",
    }
    return _page(
        request,
        "instances.html",
        page=page,
        filters=filters,
        every_tenant=every_tenant,
        reasons=ops.parked_reasons(),
        statuses=[s.value for s in InstanceStatus],
        when=when,
    )


@router.get("/instances/{instance_id}")
def instance(
    request: Request,
    instance_id: str,
    done: Annotated[int | None, Query(ge=1, le=limits.REQUEST_INTEGER_MAX)] = None,
    inbox: Annotated[str | None, Query(max_length=1000)] = None,
    timeline: Annotated[str | None, Query(max_length=1000)] = None,
    sent: Annotated[str | None, Query(max_length=limits.EVENT_ID_LENGTH_MAX)] = None,
) -> Response:
    session = signed_in(request)
    ops = scoped(request, session)
    page = ops.overview(instance_id, inbox_cursor=inbox or None, timeline_cursor=timeline or None)
    view = instance_view(page, *ops.flags_and_audit(instance_id))
    # ?done= names the audit record a repair just wrote: the banner says what that record
    # says, and only for a record of this instance (a link cannot make the page claim more).
    applied = next((a for a in view.audit if a.audit_id == done), None)
    # The chart draws the first entries of the timeline, as many as a page may hold.
    drawn = ops.timeline(instance_id, cursor=None, limit=limits.PAGE_SIZE_MAX)
    return _page(
        request,
        "instance.html",
        view=view,
        chart=timeline_chart(page, list(drawn.items), now=time.time()),
        chart_cut=drawn.next_cursor is not None,
        chart_limit=limits.PAGE_SIZE_MAX,
        done=applied,
        delivered=_sent(ops, instance_id, sent),
        offers=offers(page, session.principal),
        # A fresh event id per page: the form sent twice (a reload, a double click) is one
        # event, a repeat the inbox answers as such, never a second signal.
        event_id=f"console-{secrets.token_hex(8)}",
        unserved=ops.unserved(instance_id),
        pretty=pretty,
        distinct_cause=distinct_cause,
        when=when,
    )


def _sent(ops: ScopedOperations, instance_id: str, event_id: str | None) -> Delivery | None:
    # ?sent= names the event the signal form just delivered: the banner says what the inbox
    # holds under that id for this instance, nothing else.
    if not event_id:
        return None
    try:
        return ops.event(instance_id, event_id)
    except LedgerflowError:
        return None


@router.post("/instances/{instance_id}/signals")
def signal(
    request: Request,
    instance_id: str,
    session: FormSession,
    name: Annotated[str, Form(min_length=1, max_length=limits.EVENT_ID_LENGTH_MAX)],
    event_id: Annotated[str, Form(min_length=1, max_length=limits.EVENT_ID_LENGTH_MAX)],
    payload: Field = None,
) -> Response:
    """A signal or an approval from the signed-in principal: the HTTP API's signal, with its
    role check, its audit record and the inbox's deduplication by event id."""
    delivered = scoped(request, session).signal(
        instance_id,
        name.strip(),
        event_id=event_id,
        payload=form_json(payload or "", "payload"),
        sender=None,
        for_step=None,
        run=None,
    )
    refused = refused_problem(delivered, instance=request.url.path)
    if refused is not None:
        return error_page(request, *refused)
    target = f"{CONSOLE_PATH}/instances/{quote(instance_id, safe='')}"
    return RedirectResponse(f"{target}?sent={quote(event_id, safe='')}", status_code=303)


def repair_form(
    kind: Annotated[str, Form(max_length=40)],
    reason: Annotated[str, Form(max_length=1000)],
    seq: Field = None,
    applied: Field = None,
    evidence: Field = None,
    result: Field = None,
    status: Field = None,
    compensate: Field = None,
    resume: Field = None,
) -> dict[str, str]:
    """A repair form's fields, as typed (blank: not given); the plan page carries them on to
    the confirmation form unchanged."""
    fields = {"seq": seq, "applied": applied, "evidence": evidence, "result": result,
              "status": status, "compensate": compensate, "resume": resume}  # fmt: skip
    return {"kind": kind, "reason": reason, **{k: v or "" for k, v in fields.items()}}


RepairForm = Annotated[dict[str, str], Depends(repair_form)]


@router.post("/instances/{instance_id}/repairs/plan")
def plan(request: Request, instance_id: str, session: FormSession, form: RepairForm) -> Response:
    outcome = scoped(request, session).plan(_repair(instance_id, form))
    return _page(
        request, "plan.html", instance_id=instance_id, form=form, outcome=outcome,
        diff=plan_diff(outcome.plan),
    )  # fmt: skip


@router.post("/instances/{instance_id}/repairs")
def apply(
    request: Request,
    instance_id: str,
    session: FormSession,
    form: RepairForm,
    planned_generation: Annotated[int, Form(ge=0, le=limits.REQUEST_INTEGER_MAX)],
) -> Response:
    done: RepairResult = scoped(request, session).apply(
        _repair(instance_id, form), planned_generation=planned_generation
    )
    return RedirectResponse(
        f"{CONSOLE_PATH}/instances/{instance_id}?done={done.audit_id}", status_code=303
    )


@router.post("/instances/{instance_id}/cancel")
def cancel(
    request: Request,
    instance_id: str,
    session: FormSession,
    reason: Annotated[str, Form(min_length=1, max_length=1000)],
    compensate: Field = None,
) -> Response:
    scoped(request, session).cancel(instance_id, reason=reason, compensate=bool(compensate))
    return RedirectResponse(f"{CONSOLE_PATH}/instances/{instance_id}", status_code=303)


@router.get("/attention")
def attention(request: Request) -> Response:
    session = signed_in(request)
    # One item past the page says that more wait than are shown (never a silent cut).
    items = scoped(request, session).attention(limit=limits.PAGE_SIZE_MAX + 1)
    more = len(items) > limits.PAGE_SIZE_MAX
    return _page(
        request, "attention.html", items=items[: limits.PAGE_SIZE_MAX], more=more, when=when
    )


@router.get("/audit")
def audit(
    request: Request,
    before_id: Annotated[int | None, Query(ge=1, le=limits.REQUEST_INTEGER_MAX)] = None,
) -> Response:
    session = signed_in(request)
    # Oldest first: the newest page and, before it, one older record if there is one, which
    # is what makes the "Older" link true (a page of exactly 50 has nothing older).
    records = scoped(request, session).audit(before_id=before_id, limit=PAGE + 1)
    shown = records[-PAGE:]
    older = shown[0].audit_id if len(records) > PAGE else None
    return _page(
        request, "audit.html", records=list(reversed(shown)), older=older, when=when,
        decoded=decoded,
    )  # fmt: skip


@router.get("/versions")
def versions(request: Request) -> Response:
    session = signed_in(request)
    ops = scoped(request, session)
    return _page(
        request,
        "versions.html",
        versions=ops.versions(),
        workers=ops.workers(),
        unserved=[s for s in ops.version_summaries() if s.in_flight and not s.served_by],
        when=when,
    )


@router.get("/locks")
def locks(request: Request) -> Response:
    session = signed_in(request)
    return _page(request, "locks.html", locks=scoped(request, session).locks(), when=when)


def _repair(instance_id: str, form: dict[str, str]) -> RepairRequest:
    """A repair from the console's form: JSON fields decoded, blanks as not given."""
    kind = form_choice(RepairKind, form["kind"], "kind")
    if kind in NEEDS_STEP and not form["seq"].strip():
        raise PayloadError(f"a {kind.value} repair acts on one step: choose the step")
    return RepairRequest(
        kind=kind,
        instance_id=InstanceId(instance_id),
        actor="(the principal)",
        reason=form["reason"],
        seq=form_int(form["seq"], "seq"),
        applied={"yes": True, "no": False}.get(form["applied"]),
        evidence=form_json(form["evidence"], "evidence"),
        result=form_json(form["result"], "result"),
        status=form_choice(InstanceStatus, form["status"], "status") if form["status"] else None,
        compensate=form["compensate"] != "no",
        resume=form["resume"] == "yes",
    )


def install(app: FastAPI) -> None:
    """The console's routes, its stylesheet, and the redirect to sign-in for a page opened
    without a session."""
    app.include_router(router)
    app.include_router(console_schedules.router)
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="console-static")

    @app.get("/", include_in_schema=False)
    def _root() -> Response:
        # The server's root leads a person to the console (which asks them to sign in).
        return RedirectResponse(CONSOLE_PATH, status_code=303)

    @app.exception_handler(SignInRequiredError)
    def _sign_in(request: Request, error: SignInRequiredError) -> Response:
        return sign_in_redirect()
