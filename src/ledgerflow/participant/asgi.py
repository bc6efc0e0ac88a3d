"""The participant kit over HTTP: the routes of :mod:`ledgerflow.participant.remote`'s protocol.

A service hosts its participant with :func:`kit_routes` (to add to its own Starlette or FastAPI
app) or :func:`kit_app` (a whole ASGI app), backed by a :class:`~ledgerflow.participant.Kit`:

- ``POST /{name}/apply``: ``200 {"status": "applied", "key", "receipt", "duplicate"}``, or ``409
  {"status": "rejected", "error_code", "retryable", "message"}`` for what the kit or the business
  write refused (``422`` for an operation the service does not have). A body that does not speak
  the protocol, or an ``Idempotency-Key`` header naming another key than the body, is a ``400``
  problem (``application/problem+json``), which the engine reads as UNKNOWN, never as applied.
- ``GET /{name}/lookup/{key}?attempt=N&sent_at=T``: ``{"verdict": "applied", "key",
  "evidence"}``, ``{"verdict": "not-applied"}`` (attempts 1..N fenced) or ``{"verdict":
  "unknown", "reason"}`` for a key the kit may have forgotten (nothing fenced). ``sent_at``
  (optional, seconds since the epoch) is when the engine first sent the key.
- ``GET /{name}/precondition/{key}?original=K``: holds, satisfied or violated.
- ``GET /{name}/_kit``: the kit's declaration (its key-retention window), for a checker.

The kit's database work runs in Starlette's thread pool, off the event loop. Needs the http
extra (Starlette).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ledgerflow import limits
from ledgerflow.extras import require_extra
from ledgerflow.model.compensation import Precondition, PreconditionVerdict
from ledgerflow.model.effect import LookupVerdict
from ledgerflow.participant.kit import Applied, BusinessWrite, Kit, Refused
from ledgerflow.participant.kit_request import KitRequest
from ledgerflow.participant.remote import IDEMPOTENCY_KEY_HEADER, read_idempotency_key_header

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

PROBLEM_MEDIA_TYPE = "application/problem+json"


def kit_routes(
    name: str,
    kit: Kit[Any],
    *,
    operations: Mapping[str, BusinessWrite[Any]],
    reversed_by: Callable[[Any, Any], Any] | None = None,
) -> list[BaseRoute]:
    """The routes serving participant ``name`` from ``kit``, each operation's business write
    named in ``operations``; ``reversed_by`` is the precondition's
    (:meth:`Kit.precondition`). Example::

        app = Starlette(routes=kit_routes("inventory", kit, operations={"reserve": reserve}))
    """
    require_extra("http", purpose="the participant kit's ASGI adapter")
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    writes = dict(operations)

    async def apply(request: Request) -> JSONResponse:
        read = await _read_apply(request)
        if isinstance(read, JSONResponse):
            return read
        do = writes.get(read.operation)
        if do is None:
            return _rejected(
                422, Refused("unknown_operation", False, f"{name} has no {read.operation!r}")
            )
        outcome = await run_in_threadpool(kit.apply_request, read, do)
        if isinstance(outcome, Refused):
            return _rejected(409, outcome)
        return _applied(outcome, key=read.key)

    async def lookup(request: Request) -> JSONResponse:
        key = request.path_params["key"]
        read = read_lookup_query(request.query_params)
        if not key or isinstance(read, str):
            return problem(400, "bad lookup", read if isinstance(read, str) else "a key")
        attempt, sent_at = read
        answer = await run_in_threadpool(lambda: kit.lookup(key, attempt, sent_at=sent_at))
        if answer.verdict is LookupVerdict.APPLIED:
            evidence = {"verdict": answer.verdict.value, "key": key, "evidence": answer.evidence}
            return JSONResponse(evidence)
        if answer.verdict is LookupVerdict.UNKNOWN:
            return JSONResponse({"verdict": answer.verdict.value, "reason": answer.reason})
        return JSONResponse({"verdict": answer.verdict.value})

    async def precondition(request: Request) -> JSONResponse:
        key, original = request.path_params["key"], request.query_params.get("original")
        if not key or not original:
            return problem(400, "bad precondition", "a compensation key and '?original='")
        found = await run_in_threadpool(
            lambda: kit.precondition(key, original=original, reversed_by=reversed_by)
        )
        return JSONResponse(_precondition_body(found))

    async def declaration(request: Request) -> JSONResponse:
        return JSONResponse({**kit.declaration(), "participant": name})

    return [
        Route(f"/{name}/apply", apply, methods=["POST"]),
        Route(f"/{name}/lookup/{{key:path}}", lookup, methods=["GET"]),
        Route(f"/{name}/precondition/{{key:path}}", precondition, methods=["GET"]),
        Route(f"/{name}/_kit", declaration, methods=["GET"]),
    ]


def kit_app(
    name: str,
    kit: Kit[Any],
    *,
    operations: Mapping[str, BusinessWrite[Any]],
    reversed_by: Callable[[Any, Any], Any] | None = None,
) -> Starlette:
    """An ASGI app serving participant ``name`` from ``kit`` alone (see :func:`kit_routes`)."""
    routes = kit_routes(name, kit, operations=operations, reversed_by=reversed_by)
    from starlette.applications import Starlette

    return Starlette(routes=routes)


def problem(status: int, title: str, detail: str) -> JSONResponse:
    """An RFC 9457 problem: a request that does not speak the protocol, refused whole."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        {"type": "about:blank", "title": title, "status": status, "detail": detail},
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
    )


async def _read_apply(request: Request) -> KitRequest | JSONResponse:
    """The request an apply carries, or the 400 problem saying why it cannot be read."""
    body = await request.body()
    if len(body) > limits.JSON_INPUT_BYTES_MAX:
        return problem(400, "body too large", f"at most {limits.JSON_INPUT_BYTES_MAX} bytes")
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return problem(400, "body is not a JSON object", "the apply body is a JSON object")
    try:
        read = KitRequest.from_wire(parsed)
    except ValueError as error:
        return problem(400, "malformed apply", str(error))
    header = request.headers.get(IDEMPOTENCY_KEY_HEADER)
    if header is not None:
        try:
            headed = read_idempotency_key_header(header)
        except ValueError as error:
            return problem(400, "malformed Idempotency-Key", str(error))
        if headed != read.key:
            return problem(
                400,
                "Idempotency-Key header and body key differ",
                f"the header names {headed!r}, the body {read.key!r}: one request has one key",
            )
    return read


def _precondition_body(found: Precondition) -> dict[str, Any]:
    body: dict[str, Any] = {"verdict": found.verdict.value}
    if found.verdict is PreconditionVerdict.SATISFIED:
        body["evidence"] = found.evidence
    elif found.verdict is PreconditionVerdict.VIOLATED:
        body["reason"] = found.reason
    return body


def _applied(outcome: Applied, *, key: str) -> JSONResponse:
    from starlette.responses import JSONResponse

    # The answer names the key it is about: the engine takes an applied answer as evidence
    # only for the request it names (participant/remote.py), whatever the receipt holds.
    body = {
        "status": "applied",
        "key": key,
        "receipt": outcome.receipt,
        "duplicate": not outcome.first,
    }
    return JSONResponse(body)


def _rejected(status: int, outcome: Refused) -> JSONResponse:
    from starlette.responses import JSONResponse

    body = {
        "status": "rejected",
        "error_code": outcome.error_code,
        "retryable": outcome.retryable,
        "message": outcome.message,
    }
    return JSONResponse(body, status_code=status)


def read_lookup_query(query: Mapping[str, str]) -> tuple[int | None, float | None] | str:
    """A lookup's ``attempt`` (a positive integer) and ``sent_at`` (seconds since the epoch),
    each optional, or what is wrong with them."""
    attempt_text, sent_text = query.get("attempt"), query.get("sent_at")
    try:
        attempt = None if attempt_text is None else int(attempt_text)
    except ValueError:
        attempt = 0
    if attempt is not None and attempt < 1:
        return "'?attempt=' must be a positive integer"
    try:
        sent_at = None if sent_text is None else float(sent_text)
    except ValueError:
        sent_at = -1.0
    if sent_at is not None and not 0 <= sent_at < float("inf"):
        return "'?sent_at=' must be a time in seconds since the epoch"
    return attempt, sent_at
