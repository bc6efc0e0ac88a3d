"""How an API route is declared, authorised and answered, once for every route (internal).

:func:`api_route` is the one way to add a route under ``/v1``: it takes the route's minimum
role and writes it three times from that one value, so they cannot disagree: into the check
that runs before the handler (:func:`authorized`), into the OpenAPI document
(``x-required-role``, beside the bearer security requirement) and into the problem responses
the route documents. A POST also takes an ``Idempotency-Key`` header, declared here.

:func:`answer` carries out a state-changing call under its idempotency key (see
:mod:`ledgerflow.operators.idempotency`): the key's claim, the change with its audit record
and the answer commit in one transaction; the first answer, error answers included, is
replayed; a server error or a death leaves nothing, the key free at once. Two fault points
(fault tests only, from ``LEDGERFLOW_FAULTS``; ``where`` carries ``key`` and ``path``) lie
inside that transaction: ``api.after_key_claimed`` (the key is claimed, nothing carried out)
and ``api.before_answer_kept`` (the call is carried out, its answer not yet kept).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import FormData
from starlette.types import Receive, Scope

from ledgerflow import limits
from ledgerflow.errors import LedgerflowError, NotAuthenticatedError, PayloadError
from ledgerflow.model.authority import INSECURE_LOCAL
from ledgerflow.operators.service import (
    ALL_TENANTS,
    ApiRole,
    Operations,
    Principal,
    Replay,
    ScopedOperations,
    request_hash,
)
from ledgerflow.runtime import faults
from ledgerflow.web.models import REMOVED_IN
from ledgerflow.web.problems import PROBLEM_MEDIA_TYPE, encode, problem_of, problem_responses

F = TypeVar("F", bound=Callable[..., Any])

# What the request guard (:mod:`ledgerflow.web.request_guard`) found before any route ran,
# kept in the request's scope: the body it read, the principal of the API token, the console
# session, and the body read as JSON or as a console form's fields (off the event loop, so a
# route does not parse it again there).
BODY_KEY = "ledgerflow.body"
PRINCIPAL_KEY = "ledgerflow.principal"
SESSION_KEY = "ledgerflow.session"
JSON_KEY = "ledgerflow.json"
FORM_KEY = "ledgerflow.form"

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
    whether it was started without authentication, whether the console's cookies are always
    ``Secure`` (else only over https), and what ``/metrics`` asks for: the bearer secret it
    takes, or nothing when it is open."""

    operations: Operations
    insecure: bool
    cookie_secure: bool = False
    metrics_token: str | None = None
    metrics_open: bool = False


def server_of(request: Request) -> Server:
    server: Server = request.app.state.server
    return server


def principal_of(request: Request) -> Principal:
    """Who sent an API request: the guard authenticated its token before its body was read."""
    if server_of(request).insecure:
        return INSECURE_PRINCIPAL
    principal: Principal | None = request.scope.get(PRINCIPAL_KEY)
    if principal is None:  # only a request the guard did not see (it sees every /v1 one)
        raise NotAuthenticatedError("no valid token came with the request")
    return principal


def authorized(needed: ApiRole, *, changing: bool = False) -> Callable[..., None]:
    """The check a route with minimum role ``needed`` runs first: a valid token, a role at
    least ``needed``; the principal's scoped service is left for the handler. (The bearer
    credentials are declared for the OpenAPI document; the guard has checked them.)

    A route that changes something (``changing``) leaves the role to that service, held to
    ``needed`` as its floor: the service records the refusal with the principal and what was
    asked (a role below a change is on the audit log; a read refused is not)."""

    def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        principal = principal_of(request)
        scoped = server_of(request).operations.acting_as(principal, floor=needed)
        if not changing:
            scoped.require(needed)
        request.state.scoped = scoped

    return check


class _CheckedRequest(Request):
    """A request whose body the guard has read already (JSON, or a form's fields), off the
    event loop."""

    async def json(self) -> Any:
        if JSON_KEY in self.scope:
            return self.scope[JSON_KEY]
        return await super().json()

    def __init__(self, scope: Scope, receive: Receive) -> None:
        super().__init__(scope, receive)
        if FORM_KEY in scope:
            # Starlette keeps a request's parsed form here and parses only when it is None
            # (were that to change, the form would be parsed again, on the loop: slower, no
            # less correct).
            self._form = FormData(scope[FORM_KEY])


class CheckedRoute(APIRoute):
    """A route that takes its body as the guard read it: FastAPI would parse the JSON or the
    form again on the event loop, where two megabytes of it hold every other request for as
    long (FastAPI's documented way to change the request a route reads)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            return await handler(_CheckedRequest(request.scope, request.receive))

        return checked


def api_router(*, tags: list[str | Enum]) -> APIRouter:
    """A router of routes under ``/v1``, each taking its body as the guard read it."""
    return APIRouter(prefix="/v1", tags=tags, route_class=CheckedRoute)


def _scoped(request: Request) -> ScopedOperations:
    scoped: ScopedOperations = request.state.scoped
    return scoped


Scoped = Annotated[ScopedOperations, Depends(_scoped)]
# An instance id in a route's path (the instance and the operator routes name it alike).
InstanceIdPath = Annotated[str, Path(min_length=1, max_length=300)]


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
    operations = server_of(request).operations
    answers = operations.answers()
    scope = scoped.principal.token_id or scoped.principal.name
    target = request.url.path + ("?" + request.url.query if request.url.query else "")
    fingerprint = request_hash(request.method, target, request.scope.get(BODY_KEY, b""))
    where = {"key": key, "path": request.url.path}
    # The claim, the change with its audit record, and the answer: one transaction. A death
    # or a server error anywhere in it leaves none of them, and the key free for the retry.
    with operations.transaction():
        held = answers.claim(scope=scope, key=key, request=fingerprint)
        if isinstance(held, Replay):
            response = _response(held.status, json.loads(held.body))
            response.headers[REPLAYED_HEADER] = "true"
            return response
        if faults.plan is not None:
            faults.point("api.after_key_claimed", **where)
        status, body = _outcome(request, carry_out)
        if faults.plan is not None:
            faults.point("api.before_answer_kept", **where)
        answers.finish(held, status=status, body=encode(body).decode())
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


# -- names renamed in requests, kept as deprecated aliases for one minor version ------------------

# ``?workflow=`` on a listing: the old name of ``?workflow_name=``, as responses name the field.
DeprecatedWorkflow = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=limits.NAME_LENGTH_MAX,
        deprecated=True,
        description=f"deprecated alias of workflow_name (until {REMOVED_IN})",
    ),
]
DEPRECATION_HEADER = "Deprecation"


def one_name(value: str | None, alias: str | None, *, name: str, old: str) -> str | None:
    """The value given under ``name`` or its deprecated alias ``old``; both with two values
    is a client's mistake (422), never a silent choice."""
    if alias is None or value == alias:
        return value
    if value is not None:
        raise PayloadError(
            f"{old!r} is the deprecated name of {name!r} (until {REMOVED_IN}): give {name!r} only"
        )
    return alias


def deprecating(response: Response, names: list[str]) -> Response:
    """``response``, with ``Deprecation: true`` when the request used a deprecated name: a
    client that still sends one is told so on every answer, before the alias goes away."""
    if names:
        response.headers[DEPRECATION_HEADER] = "true"
    return response
