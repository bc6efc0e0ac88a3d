"""Every error answer of the HTTP API, as an RFC 9457 problem document (internal).

A problem is ``application/problem+json``: ``type`` (``urn:ledgerflow:error:LFnnn``, stable
per error code, see docs/errors.md), ``title`` (what the code means), ``status``, ``detail``
(this occurrence, with the ids it concerns) and ``instance`` (the request's path), plus the
code itself and, where it helps, extension members (the refused delivery, the fields that
failed validation).

The status comes from the error's class (:data:`STATUS_BY_ERROR`, most specific first): a
client's mistake is always a 4xx. Anything else is a real server error: a 500 whose detail
says nothing of the internals (no SQL, no driver message, no path); the cause goes to the
server's log, redacted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ledgerflow.errors import (
    ConcurrencyError,
    EventRefusedError,
    HostNotAllowedError,
    IdempotencyKeyReusedError,
    IllegalTransitionError,
    InboxFullError,
    InstanceNotFoundError,
    InvalidCursorError,
    LedgerflowError,
    MethodNotAllowedError,
    NotAuthenticatedError,
    NotAuthorizedError,
    PayloadError,
    PayloadTooLargeError,
    RepairRefusedError,
    RequestTimeoutError,
    ResultTimeoutError,
    RouteNotFoundError,
    ScheduleNotFoundError,
    ServerBusyError,
    StorageUnavailableError,
    UnknownVersionError,
    UnknownWorkflowError,
    UnsupportedMediaTypeError,
    UpdateRejectedError,
    VersionRetiredError,
    WorkflowError,
)
from ledgerflow.redaction import redact

log = logging.getLogger("ledgerflow.web")

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:ledgerflow:error:"
SERVER_ERROR_CODE = LedgerflowError.code

# Most specific first: the first class an error is an instance of gives its status.
STATUS_BY_ERROR: tuple[tuple[type[LedgerflowError], int], ...] = (
    (NotAuthenticatedError, 401),
    (NotAuthorizedError, 403),
    (InstanceNotFoundError, 404),
    (ScheduleNotFoundError, 404),
    (RouteNotFoundError, 404),
    (MethodNotAllowedError, 405),
    (PayloadTooLargeError, 413),
    # The instance's state refuses the event (its inbox is full), not the request's shape.
    (InboxFullError, 409),
    (UnsupportedMediaTypeError, 415),
    (HostNotAllowedError, 421),
    (RequestTimeoutError, 408),
    (ServerBusyError, 503),
    (PayloadError, 422),
    # The workflow's validator (or handler) refused the update: the request's content.
    (UpdateRejectedError, 422),
    (InvalidCursorError, 422),
    (UnknownWorkflowError, 422),
    (UnknownVersionError, 422),
    (VersionRetiredError, 409),
    (IdempotencyKeyReusedError, 409),
    (EventRefusedError, 409),
    (RepairRefusedError, 409),
    (ConcurrencyError, 409),
    (IllegalTransitionError, 409),
    (WorkflowError, 409),
    (ResultTimeoutError, 409),
)


class Problem(BaseModel):
    """An RFC 9457 problem document (extension members may follow)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="urn:ledgerflow:error:LFnnn, stable per error code")
    title: str
    status: int
    detail: str
    instance: str = Field(description="the path of the request that failed")
    code: str = Field(description="the Ledgerflow error code (docs/errors.md)")


# An error's ids go into the problem as extension members; one that would shadow a member of
# RFC 9457 is renamed (a WorkflowError's ``status`` is the instance's).
_RENAMED = {"status": "instance_status", "type": "error_type", "title": "error_title"}


def status_for(error: LedgerflowError) -> int | None:
    """The 4xx a client's error is answered with; None for a server error."""
    for kind, status in STATUS_BY_ERROR:
        if isinstance(error, kind):
            return status
    return None


def title_of(kind: type[LedgerflowError]) -> str:
    """What the code means: the first paragraph of its class's docstring, on one line."""
    paragraph = (kind.__doc__ or kind.__name__).strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def problem_body(
    *, code: str, title: str, status: int, detail: str, instance: str, **extra: Any
) -> dict[str, Any]:
    return {
        "type": f"{TYPE_PREFIX}{code}",
        "title": title,
        "status": status,
        "detail": redact(detail),
        "instance": instance,
        "code": code,
        **extra,
    }


def problem_of(
    error: LedgerflowError, *, instance: str, **extra: Any
) -> tuple[int, dict[str, Any]]:
    """The status and problem document that answer ``error``."""
    status = status_for(error)
    if status is None:
        return server_problem(error, instance=instance)
    body = problem_body(
        code=error.code,
        title=title_of(type(error)),
        status=status,
        detail=error.message,
        instance=instance,
        **{_RENAMED.get(k, k): v for k, v in error.ids.items() if isinstance(v, str | int)},
        **extra,
    )
    return status, body


# How many of a request's validation errors its problem's detail spells out (all are in
# ``errors``).
VALIDATION_ERRORS_SAID = 5


def validation_problem(
    errors: Sequence[Mapping[str, Any]], *, instance: str
) -> tuple[int, dict[str, Any]]:
    """The 422 answering a request that does not validate: the detail says what is wrong in
    words (which field is missing, which one is unknown), ``errors`` lists each as
    ``{"where", "problem", "type"}`` (pydantic's own message and error type)."""
    listed = [
        {"where": _where(e), "problem": str(e.get("msg")), "type": str(e.get("type"))}
        for e in errors
    ]
    said = "; ".join(_said(e) for e in errors[:VALIDATION_ERRORS_SAID])
    more = len(errors) - VALIDATION_ERRORS_SAID
    if more > 0:
        said += f"; and {more} more (see errors)"
    error = PayloadError(f"the request is not valid: {said}")
    return problem_of(error, instance=instance, errors=listed)


def _where(error: Mapping[str, Any]) -> str:
    return ".".join(str(part) for part in error.get("loc", ()))


def _said(error: Mapping[str, Any]) -> str:
    """One validation error in words: the field and the part of the request it belongs to."""
    location = [str(part) for part in error.get("loc", ())]
    part = {"body": "the body", "query": "the query", "path": "the path", "header": "the headers"}
    field = location[-1] if location else ""
    within = ".".join(location[1:-1])
    container = part.get(location[0], location[0]) if location else "the request"
    if within:
        container = f"{within} in {container}"
    kind = str(error.get("type"))
    if kind == "missing" and len(location) > 1:
        return f"{field!r} is required and missing from {container}"
    if kind == "extra_forbidden" and len(location) > 1:
        return f"{field!r} in {container} is not a field this route takes (a typo?)"
    message = str(error.get("msg")).removeprefix("Value error, ")
    return f"{_where(error)}: {message}" if location else message


def server_problem(error: BaseException, *, instance: str) -> tuple[int, dict[str, Any]]:
    """A 500 that says nothing of the internals; the cause is logged (redacted)."""
    log.error("server error answering %s: %s", instance, redact(repr(error)))
    if isinstance(error, StorageUnavailableError):
        code, detail = error.code, "the journal could not be reached; nothing was decided, retry"
    else:
        code, detail = SERVER_ERROR_CODE, "the server failed to answer; the error is in its log"
    body = problem_body(
        code=code,
        title="Internal server error",
        status=500,
        detail=detail,
        instance=instance,
    )
    return 500, body


def encode(body: dict[str, Any]) -> bytes:
    """A problem (or any answer) as JSON bytes. ASCII escapes throughout: text from a request
    (a lone surrogate, say) can never make the answer itself fail to encode."""
    return json.dumps(body, ensure_ascii=True, sort_keys=True).encode()


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of the problems a route may answer with."""
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


_DESCRIPTIONS = {
    401: "no valid token (LF704)",
    403: "the token's role does not allow this (LF701)",
    404: "no such instance in this token's tenant (LF400), or no such route (LF121)",
    405: "the route does not take this method (LF122)",
    409: "refused by the ledger's state (LF3xx, LF402, LF70x)",
    410: "the event came after the instance ended (LF305)",
    413: "the body is larger than REQUEST_BODY_BYTES_MAX (LF111)",
    415: "the body is not application/json (LF123)",
    422: "the request cannot be read: validation, bounds, naming rule (LF110...)",
    500: "a server error; nothing of its internals is said (LF000, LF201)",
    503: "the journal cannot be read and written now",
}
