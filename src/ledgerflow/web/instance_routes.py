"""The API's instance routes: list, start, show, result, cancel, signal, callbacks (internal).

Each handler is a thin translation: it reads the validated request, calls the principal's
scoped operators' service (:class:`~ledgerflow.operators.scoped.ScopedOperations`) and shapes
the answer (:mod:`ledgerflow.operators.shapes`). Handlers are plain functions: FastAPI runs
them in its thread pool, since the store blocks.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request
from fastapi.responses import Response

from ledgerflow import InstanceStatus, NotPublished, limits
from ledgerflow.errors import EventRefusedError, NotAuthorizedError
from ledgerflow.model import names
from ledgerflow.operators.service import (
    ApiRole,
    Delivered,
    DeliveryOutcome,
    InstanceQuery,
)
from ledgerflow.operators.shapes import (
    delivery_json,
    inbox_entry_json,
    overview_json,
    page_json,
    record_json,
    refused,
    timeline_json,
    value_json,
)
from ledgerflow.runtime import values
from ledgerflow.web.declare import (
    DeprecatedWorkflow,
    InstanceIdPath,
    Outcome,
    Scoped,
    answer,
    api_route,
    api_router,
    deprecating,
    one_name,
)
from ledgerflow.web.models import (
    CancelBody,
    CompletionBody,
    DeliveryOut,
    DetailOut,
    InstanceOut,
    InstancePageOut,
    PageOut,
    Record,
    ResultOut,
    SignalBody,
    StartBody,
    StartedOut,
    UpdateBody,
    UpdateOut,
    ValueOut,
)
from ledgerflow.web.problems import problem_of

router = api_router(tags=["instances"])

NamePath = Annotated[str, Path(min_length=1, max_length=limits.EVENT_ID_LENGTH_MAX)]
Text = Annotated[str | None, Query(min_length=1, max_length=limits.BUSINESS_KEY_LENGTH_MAX)]
Moment = Annotated[float | None, Query(ge=0, le=1e11, allow_inf_nan=False)]
CursorQuery = Annotated[str | None, Query(min_length=1, max_length=1000)]
Limit = Annotated[int, Query(ge=1, le=limits.PAGE_SIZE_MAX)]
PAGE = limits.PAGE_SIZE_DEFAULT


@api_route(
    router, "GET", "/instances", role=ApiRole.VIEWER, response_model=InstancePageOut,
    summary="List instances, newest first, a page at a time",
)  # fmt: skip
def list_instances(
    scoped: Scoped,
    workflow_name: Text = None,
    workflow: DeprecatedWorkflow = None,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    status: InstanceStatus | None = None,
    tenant: Text = None,
    key_prefix: Text = None,
    flagged: bool | None = None,
    reason_code: Text = None,
    created_from: Moment = None,
    created_until: Moment = None,
    cursor: CursorQuery = None,
    limit: Limit = PAGE,
) -> Any:
    query = InstanceQuery(
        tenant=tenant,
        workflow_name=one_name(workflow_name, workflow, name="workflow_name", old="workflow"),
        workflow_version=version,
        status=status.value if status else None,
        key_prefix=key_prefix,
        flagged=flagged,
        reason_code=reason_code,
        created_from=created_from,
        created_until=created_until,
        limit=limit,
    )
    return page_json(scoped.page(query, cursor=cursor), record_json)


@api_route(
    router, "POST", "/instances", role=ApiRole.SIGNALLER, response_model=StartedOut,
    status_code=201, also={200: "the business key had started it already"},
    summary="Start the instance of a business key (or find it)",
)  # fmt: skip
def start_instance(request: Request, scoped: Scoped, body: StartBody) -> Response:
    def carry_out() -> Outcome:
        started = scoped.start(
            body.workflow_name,
            key=body.business_key,
            input=body.input,
            version=body.version,
            tenant=body.tenant,
            start_at=body.start_at,
            start_in=body.start_in,
            if_running=body.if_running,
            if_ended=body.if_ended,
            signal=body.signal,
            signal_event_id=body.signal_event_id,
            signal_payload=body.signal_payload,
            signal_wakes=body.signal_wakes,
            debounce_seconds=body.debounce_seconds,
            debounce_max_seconds=body.debounce_max_seconds,
        )
        answer_body = {
            "created": started.created,
            "debounced": started.debounced,
            "instance": record_json(started.instance),
        }
        return (201 if started.created else 200), answer_body

    return deprecating(answer(request, carry_out), body.deprecated_names())


@api_route(
    router, "GET", "/instances/{instance_id}", role=ApiRole.VIEWER, response_model=DetailOut,
    errors=(404,),
    summary="An instance with its ledgers, flags and audit records, and the first page of its "
    "timeline and inbox",
)  # fmt: skip
def show_instance(scoped: Scoped, instance_id: InstanceIdPath) -> Any:
    page = scoped.overview(instance_id)
    flags, audit = scoped.flags_and_audit(instance_id)
    return {
        **overview_json(page),
        "flags": [record_json(f) for f in flags],
        "audit": [record_json(a) for a in audit],
    }


@api_route(
    router, "GET", "/instances/{instance_id}/inbox", role=ApiRole.VIEWER, response_model=PageOut,
    errors=(404,),
    summary="An instance's inbox a page at a time, oldest first (large payloads by size only)",
)  # fmt: skip
def instance_inbox(
    scoped: Scoped, instance_id: InstanceIdPath, cursor: CursorQuery = None, limit: Limit = PAGE
) -> Any:
    return page_json(scoped.inbox(instance_id, cursor=cursor, limit=limit), inbox_entry_json)


@api_route(
    router, "GET", "/instances/{instance_id}/inbox/{event_id:path}", role=ApiRole.VIEWER,
    response_model=Record, errors=(404,),
    summary="One event of an instance's inbox, whole (its payload however large)",
)  # fmt: skip
def instance_event(scoped: Scoped, instance_id: InstanceIdPath, event_id: NamePath) -> Any:
    return record_json(scoped.event(instance_id, event_id))


@api_route(
    router, "GET", "/instances/{instance_id}/timeline", role=ApiRole.VIEWER,
    response_model=PageOut, errors=(404,),
    summary="An instance's timeline a page at a time, oldest first",
)  # fmt: skip
def instance_timeline(
    scoped: Scoped, instance_id: InstanceIdPath, cursor: CursorQuery = None, limit: Limit = PAGE
) -> Any:
    return page_json(scoped.timeline(instance_id, cursor=cursor, limit=limit), timeline_json)


@api_route(
    router, "GET", "/instances/{instance_id}/result", role=ApiRole.VIEWER,
    response_model=ResultOut, errors=(404, 409),
    summary="The result of a SUCCEEDED instance (409 with how it ended otherwise)",
)  # fmt: skip
def instance_result(scoped: Scoped, instance_id: InstanceIdPath) -> Any:
    record = scoped.result(instance_id)
    return {"instance_id": record.instance_id, "status": "SUCCEEDED", "result": record.result_value}


@api_route(
    router, "GET", "/workflows/{workflow}/keys/{key:path}", role=ApiRole.VIEWER,
    response_model=InstanceOut, errors=(404,),
    summary="The instance a business key started (the key may hold '/')",
)  # fmt: skip
def find_by_key(
    scoped: Scoped,
    workflow: Annotated[str, Path(min_length=1, max_length=limits.NAME_LENGTH_MAX)],
    key: Annotated[str, Path(min_length=1, max_length=limits.BUSINESS_KEY_LENGTH_MAX)],
    tenant: Text = None,
) -> Any:
    found = scoped.find(
        tenant=names.tenant(tenant) if tenant is not None else None,
        workflow=names.workflow_name(workflow),
        key=names.business_key(key),
    )
    return record_json(found)


@api_route(
    router, "POST", "/instances/{instance_id}/cancel", role=ApiRole.OPERATOR,
    response_model=InstanceOut, errors=(404,),
    summary="Ask for the instance to be cancelled (durable; the first request wins)",
)  # fmt: skip
def cancel_instance(
    request: Request, scoped: Scoped, instance_id: InstanceIdPath, body: CancelBody
) -> Response:
    def carry_out() -> Outcome:
        record = scoped.cancel(instance_id, reason=body.reason, compensate=body.compensate)
        return 200, record_json(record)

    return answer(request, carry_out)


@api_route(
    router, "POST", "/instances/{instance_id}/signals/{name}", role=ApiRole.SIGNALLER,
    response_model=DeliveryOut, status_code=202, errors=(404, 410),
    also={200: "a repeat of an accepted event"},
    summary="Deliver a signal or an approval, sent by the authenticated principal",
)  # fmt: skip
def signal_instance(
    request: Request,
    scoped: Scoped,
    instance_id: InstanceIdPath,
    name: NamePath,
    body: SignalBody,
) -> Response:
    def carry_out() -> Outcome:
        delivered = scoped.signal(
            instance_id,
            name,
            event_id=body.event_id,
            payload=body.payload,
            sender=body.sender,
            for_step=body.step,
            run=body.run,
        )
        return _delivery_answer(request, delivered)

    return answer(request, carry_out)


@api_route(
    router, "POST", "/instances/{instance_id}/updates/{name}", role=ApiRole.SIGNALLER,
    response_model=UpdateOut, errors=(404, 409, 422),
    also={202: "stored, not answered within the timeout: read GET .../values/update:ID"},
    summary="Ask the instance to handle an update and answer with its reply (its validator "
    "may refuse it: 422, nothing stored)",
)  # fmt: skip
def update_instance(
    request: Request, scoped: Scoped, instance_id: InstanceIdPath, name: NamePath,
    body: UpdateBody,
) -> Response:  # fmt: skip
    def carry_out() -> Outcome:
        delivered, reply = scoped.update(
            instance_id, name, update_id=body.update_id, payload=body.payload,
            timeout=body.timeout,
        )  # fmt: skip
        replied = reply is not values.NO_REPLY_YET
        return (200 if replied else 202), {
            "update_id": body.update_id, "instance_id": delivered.delivery.instance_id,
            "name": name, "replied": replied, "reply": reply if replied else None,
        }  # fmt: skip

    return answer(request, carry_out)


@api_route(
    router, "GET", "/instances/{instance_id}/values/{name:path}", role=ApiRole.VIEWER,
    response_model=ValueOut, errors=(404,),
    summary="The value the instance last published under a name, with its version (read from "
    "the store: no worker needed)",
)  # fmt: skip
def instance_value(scoped: Scoped, instance_id: InstanceIdPath, name: NamePath) -> Any:
    found = scoped.read_value(instance_id, name)
    if isinstance(found, NotPublished):
        return {"name": name, "published": False, "version": 0}
    return {**value_json(found), "published": True}


@api_route(
    router, "POST", "/effects/completion", role=ApiRole.SIGNALLER, response_model=DeliveryOut,
    status_code=202, errors=(404, 410), also={200: "a repeat of an accepted callback"},
    summary="A participant's callback for an asynchronous effect, by its idempotency key",
)  # fmt: skip
def complete_effect(request: Request, scoped: Scoped, body: CompletionBody) -> Response:
    def carry_out() -> Outcome:
        delivered = scoped.complete_effect(
            body.idempotency_key,
            applied=body.applied,
            evidence=body.evidence,
            reason=body.reason,
            event_id=body.event_id,
        )
        return _delivery_answer(request, delivered)

    return answer(request, carry_out)


def _delivery_answer(request: Request, delivered: Delivered) -> Outcome:
    """202 accepted, 200 a repeat; a refused event (a repeat of one too) is a problem that
    carries the delivery as the inbox keeps it."""
    body = delivery_json(delivered)
    problem = refused_problem(delivered, instance=request.url.path, delivery=body)
    if problem is None:
        return (202 if delivered.outcome is DeliveryOutcome.ACCEPTED else 200), body
    return problem


def refused_problem(
    delivered: Delivered, *, instance: str, **extra: Any
) -> tuple[int, dict[str, Any]] | None:
    """The status and problem of an event the inbox refused (None when it took it): a
    refused approval is 403 (the sender is not an approver), an instance that ended 410,
    any other refusal 409. The console's signal form answers with the same."""
    delivery = delivered.delivery
    refusal = delivery.refusal if refused(delivered) else None
    if refusal is None:
        return None
    reason = delivery.reason or refusal
    error: EventRefusedError | NotAuthorizedError
    if refusal == "not-approver":
        error = NotAuthorizedError(f"the event was refused: {reason}", actor=delivery.sender)
    else:
        error = EventRefusedError(
            f"the event was refused: {reason}",
            instance_id=delivery.instance_id,
            event_id=delivery.event_id,
            refusal=refusal,
        )
    status, problem = problem_of(error, instance=instance, **extra)
    if refusal == "ended":
        # Gone for good: the instance will never take an event again.
        status = problem["status"] = 410
    return status, problem
