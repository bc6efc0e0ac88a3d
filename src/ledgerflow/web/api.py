"""The HTTP callback endpoint: deliver events to instances and read instances back.

This module owns the mapping between HTTP and the operators' service
(:class:`~ledgerflow.operators.service.Operations`, the one the ``ledgerflow`` command calls).
External services and people answer a waiting workflow here (by instance id or by business
key), and every answer a caller can get is one of a small, stable set: accepted (202), a repeat
of an accepted event (200), refused as too late (409), refused because the instance ended
(410), refused because the sender may not approve (403), no such instance (404), or unreadable
input (422). A caller that retries therefore always learns the same fate for the same event
id, and bad input is never a 500.

Delivering and reading need only the store, never the workflow code, so the app is built from a
store URL alone; the service's synchronous calls run in Starlette's thread pool because the
store blocks. Business keys, tenants and workflow names in a path or query follow the one
naming rule (:mod:`ledgerflow.model.names`), as they do in the library and on the command line;
bodies are read with their nesting bounded. Answers have the shapes of
:mod:`ledgerflow.operators.shapes`.

This module needs the ``http`` extra (Starlette); :func:`ledgerflow.cli.serve` says so when it
is missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ledgerflow.errors import (
    ConcurrencyError,
    InstanceNotFoundError,
    LedgerflowError,
    PayloadError,
    StorageError,
)
from ledgerflow.model import json_text, names
from ledgerflow.operators.service import Delivered, DeliveryOutcome, Operations
from ledgerflow.operators.shapes import delivery_json, detail_json, refused

IDEMPOTENCY_HEADER = "Idempotency-Key"
_BODY_FIELDS = frozenset({"event_id", "payload", "sender", "step", "run"})

STATUS_FOR_OUTCOME = {
    DeliveryOutcome.ACCEPTED: 202,
    DeliveryOutcome.DUPLICATE: 200,
    DeliveryOutcome.LATE: 409,
    DeliveryOutcome.ENDED: 410,
    DeliveryOutcome.NOT_APPROVER: 403,
}
# A repeat of an event that was refused is still refused: a retrying caller must not read a
# 200 as "it worked now".
REFUSED_DUPLICATE_STATUS = 409


class BadRequestError(Exception):
    """Input the endpoint cannot read; answered 422 with the message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalRequest:
    """A delivery as the caller asked for it, checked for types before the engine sees it."""

    event_id: str
    payload: Any
    sender: str | None
    step: int | None
    run: int | None


def status_for(delivered: Delivered) -> int:
    if delivered.outcome is DeliveryOutcome.DUPLICATE and refused(delivered):
        return REFUSED_DUPLICATE_STATUS
    return STATUS_FOR_OUTCOME[delivered.outcome]


def _optional_int(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    # bool is an int to Python, never a step number to a caller.
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadRequestError(f"{field!r} must be an integer or null")


def parse_signal(body: Any, header_event_id: str | None) -> SignalRequest:
    """Check a delivery's body (already decoded JSON) and the idempotency header."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    unknown = sorted(set(body) - _BODY_FIELDS)
    if unknown:
        raise BadRequestError(
            f"unknown field(s) {', '.join(unknown)}; expected {', '.join(sorted(_BODY_FIELDS))}"
        )
    event_id = body.get("event_id")
    if event_id is not None and not isinstance(event_id, str):
        raise BadRequestError("'event_id' must be a string")
    if header_event_id is not None and event_id is not None and header_event_id != event_id:
        raise BadRequestError(
            f"the {IDEMPOTENCY_HEADER} header and 'event_id' name different events"
        )
    event_id = event_id if event_id is not None else header_event_id
    if not event_id:
        raise BadRequestError(
            f"an event id is required: 'event_id' in the body or the {IDEMPOTENCY_HEADER} header"
        )
    sender = body.get("sender")
    if sender is not None and not isinstance(sender, str):
        raise BadRequestError("'sender' must be a string or null")
    return SignalRequest(
        event_id=event_id,
        payload=body.get("payload"),
        sender=sender,
        step=_optional_int(body, "step"),
        run=_optional_int(body, "run"),
    )


def _error(status: int, error: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


async def _read_json(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"the body is not valid JSON: {exc}") from None
    return json_text.loads(text, what="the body")


Handler = Callable[[Request], Awaitable[Response]]


def _answers_errors(handler: Handler) -> Handler:
    """Turn the known failures into their statuses; anything else is a real server error."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except BadRequestError as exc:
            return _error(422, "bad_request", str(exc))
        except PayloadError as exc:
            return _error(422, "bad_request", str(exc), code=exc.code)
        except InstanceNotFoundError as exc:
            # The engine's message is generic; the caller needs to see which id was unknown.
            missing = exc.instance_id
            return _error(404, "not_found", str(exc), code=exc.code, instance_id=missing)
        except StorageError as exc:
            # The journal is unreachable or busy: the caller should retry, nothing was decided.
            return _error(503, "unavailable", str(exc), code=exc.code)
        except ConcurrencyError as exc:
            # An event id reused for another event: the new event was not delivered.
            return _error(409, "event_id_reused", str(exc), code=exc.code)
        except LedgerflowError as exc:
            return _error(409, "refused", str(exc), code=exc.code)

    return guarded


class _Routes:
    """The endpoints, over one operators' service for the app's life."""

    def __init__(self, store_url: str) -> None:
        # The server's own journal: created and migrated on open unless its URL says
        # ?migrate=false, as a worker's is.
        self.operations = Operations(store_url, migrate=None)

    async def deliver(self, instance_id: str, name: str, parsed: SignalRequest) -> Response:
        delivered = await run_in_threadpool(
            self.operations.signal,
            instance_id,
            name,
            event_id=parsed.event_id,
            payload=parsed.payload,
            sender=parsed.sender,
            for_step=parsed.step,
            run=parsed.run,
        )
        return JSONResponse(delivery_json(delivered), status_code=status_for(delivered))

    @staticmethod
    async def parsed(request: Request) -> SignalRequest:
        return parse_signal(await _read_json(request), request.headers.get(IDEMPOTENCY_HEADER))

    async def signal_by_id(self, request: Request) -> Response:
        parsed = await self.parsed(request)
        params = request.path_params
        return await self.deliver(params["instance_id"], params["name"], parsed)

    async def signal_by_key(self, request: Request) -> Response:
        parsed = await self.parsed(request)
        params = request.path_params
        # The same rule as a start's: an NFD spelling of a key finds the instance its NFC
        # spelling started, and an empty tenant is refused, not taken for the default.
        tenant = names.tenant(request.query_params.get("tenant"))
        workflow = names.workflow_name(params["workflow"])
        key = names.business_key(params["key"])
        found = await run_in_threadpool(
            lambda: self.operations.find(tenant=tenant, workflow=workflow, key=key)
        )
        if found is None:
            return _error(
                404,
                "not_found",
                f"no {workflow!r} instance has business key {key!r} in tenant {tenant!r}",
            )
        return await self.deliver(found.instance_id, params["name"], parsed)

    async def show(self, request: Request) -> Response:
        detail = await run_in_threadpool(self.operations.detail, request.path_params["instance_id"])
        return JSONResponse(detail_json(detail))

    @staticmethod
    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})


def create_app(store_url: str) -> Starlette:
    """The HTTP app for the store at ``store_url`` (one service, closed when the app stops)."""
    routes = _Routes(store_url)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(routes.operations.close)

    return Starlette(
        routes=[
            Route("/health", routes.health, methods=["GET"]),
            Route("/instances/{instance_id}", _answers_errors(routes.show), methods=["GET"]),
            Route(
                "/instances/{instance_id}/signals/{name}",
                _answers_errors(routes.signal_by_id),
                methods=["POST"],
            ),
            # {key:path}: business keys may contain '/', the route still ends in /signals/NAME.
            Route(
                "/workflows/{workflow}/keys/{key:path}/signals/{name}",
                _answers_errors(routes.signal_by_key),
                methods=["POST"],
            ),
        ],
        lifespan=lifespan,
    )
