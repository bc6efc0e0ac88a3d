"""How an API route is declared, authorised and answered, once for every route (internal).

:func:`api_route` is the one way to add a route under ``/v1``: it takes the route's minimum
role and writes it three times from that one value, so they cannot disagree: into the check
that runs before the handler (:func:`authorized`), into the OpenAPI document
(``x-required-role``, beside the bearer security requirement) and into the problem responses
the route documents. A POST also takes an ``Idempotency-Key`` header, declared here.

:func:`answer` carries out a state-changing call under its idempotency key (see
:mod:`ledgerflow.operators.idempotency`): the first answer, error answers included, is stored
and replayed; a server error frees the key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ledgerflow import limits
from ledgerflow.errors import LedgerflowError
from ledgerflow.model.authority import INSECURE_LOCAL
from ledgerflow.operators.service import (
    ALL_TENANTS,
    ApiRole,
    Operations,
    Principal,
    ScopedOperations,
    request_hash,
)
from ledgerflow.web.problems import PROBLEM_MEDIA_TYPE, encode, problem_of, problem_responses
from ledgerflow.web.request_guard import BODY_KEY

F = TypeVar("F", bound=Callable[..., Any])

ROLE_EXTENSION = "x-required-role"
# Who a server started with --insecure-no-auth (loopback only) takes every caller for.
INSECURE_PRINCIPAL = Principal(name=INSECURE_LOCAL, role=ApiRole.ADMIN, tenant=ALL_TENANTS)
REPLAYED_HEADER = "Idempotent-Replayed"

bearer = HTTPBearer(
    auto_error=False, description="an API token: `ledgerflow tokens create --name N --role R`"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Server:
    """What every request is answered with: the operators' service over the server's journal,
    and whether it was started without authentication."""

    operations: Operations
    insecure: bool


def server_of(request: Request) -> Server:
    server: Server = request.app.state.server
    return server


def principal_of(request: Request, token: str | None) -> Principal:
    server = server_of(request)
    if server.insecure:
        return INSECURE_PRINCIPAL
    return server.operations.tokens().authenticate(token)


def authorized(needed: ApiRole, *, changing: bool = False) -> Callable[..., None]:
    """The check a route with minimum role ``needed`` runs first: a valid token, a role at
    least ``needed``; the principal's scoped service is left for the handler.

    A route that changes something (``changing``) leaves the role to that service, held to
    ``needed`` as its floor: the service records the refusal with the principal and what was
    asked (a role below a change is on the audit log; a read refused is not)."""

    def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        principal = principal_of(request, credentials.credentials if credentials else None)
        scoped = server_of(request).operations.acting_as(principal, floor=needed)
        if not changing:
            scoped.require(needed)
        request.state.scoped = scoped

    return check


def _scoped(request: Request) -> ScopedOperations:
    scoped: ScopedOperations = request.state.scoped
    return scoped


Scoped = Annotated[ScopedOperations, Depends(_scoped)]


def _idempotency_key(
    request: Request,
    key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=limits.IDEMPOTENCY_KEY_LENGTH_MAX,
            pattern=r"^[!-~]+$",
            description="repeat a POST with the same key and body to get its first answer",
        ),
    ] = None,
) -> None:
    request.state.idempotency_key = key


def api_route(
    router: APIRouter,
    method: str,
    path: str,
    *,
    role: ApiRole,
    response_model: Any,
    status_code: int = 200,
    errors: tuple[int, ...] = (),
    also: dict[int, str] | None = None,
    summary: str,
) -> Callable[[F], F]:
    """Declare a route of the API with its minimum role, response model and problems
    (``also``: other success statuses it answers with the same model, and what they mean)."""
    posting = method == "POST"
    dependencies = [Depends(authorized(role, changing=posting))]
    if posting:
        dependencies.append(Depends(_idempotency_key))
    statuses = (401, 403, 422, 500, *errors, *((409, 413, 415) if posting else ()))

    def decorate(handler: F) -> F:
        router.add_api_route(
            path,
            handler,
            methods=[method],
            dependencies=dependencies,
            response_model=response_model,
            status_code=status_code,
            responses={
                **problem_responses(*sorted(set(statuses))),
                **{s: {"model": response_model, "description": d} for s, d in (also or {}).items()},
            },
            openapi_extra={ROLE_EXTENSION: role.value},
            summary=summary,
            description=f"Needs a token with the `{role.value}` role or above.",
        )
        return handler

    return decorate


Outcome = tuple[int, Any]


def answer(request: Request, carry_out: Callable[[], Outcome]) -> Response:
    """Carry out a POST's call once per idempotency key; errors become problem documents."""
    key: str | None = getattr(request.state, "idempotency_key", None)
    if key is None:
        return _response(*_outcome(request, carry_out))
    scoped: ScopedOperations = request.state.scoped
    answers = server_of(request).operations.answers()
    scope = scoped.principal.token_id or scoped.principal.name
    target = request.url.path + ("?" + request.url.query if request.url.query else "")
    fingerprint = request_hash(request.method, target, request.scope.get(BODY_KEY, b""))
    replay = answers.claim(scope=scope, key=key, request=fingerprint)
    if replay is not None:
        response = _response(replay.status, json.loads(replay.body))
        response.headers[REPLAYED_HEADER] = "true"
        return response
    try:
        status, body = _outcome(request, carry_out)
    except BaseException:
        answers.release(scope=scope, key=key)
        raise
    answers.finish(scope=scope, key=key, status=status, body=encode(body).decode())
    return _response(status, body)


def _outcome(request: Request, carry_out: Callable[[], Outcome]) -> Outcome:
    try:
        return carry_out()
    except LedgerflowError as error:
        status, problem = problem_of(error, instance=request.url.path)
        if status >= 500:
            raise
        return status, problem


def _response(status: int, body: Any) -> Response:
    media = PROBLEM_MEDIA_TYPE if status >= 400 else "application/json"
    return Response(encode(body), status_code=status, media_type=media)
