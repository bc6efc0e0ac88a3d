"""The HTTP app ``ledgerflow serve`` runs: the API under ``/v1``, the console under
``/console``, health checks, and the answers to every error (internal).

One :class:`~ledgerflow.operators.service.Operations` over the server's journal answers every
request; each request is checked for its host and authenticated (a bearer token for the API, a
session for the console) by the request guard before its body is read
(:mod:`ledgerflow.web.request_guard`), and scoped to its principal before a handler runs.
``/healthz`` says the process serves; ``/readyz`` proves the journal can be read and written
now, and is the only route that answers 503.

Every error of the API is a problem document (:mod:`ledgerflow.web.problems`): an unknown
route, a wrong method, a validation failure and a server error too. The console answers its
own errors with pages (:mod:`ledgerflow.web.console`).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ledgerflow.errors import (
    LedgerflowError,
    MethodNotAllowedError,
    NotAuthenticatedError,
    RequestError,
    RouteNotFoundError,
)
from ledgerflow.model.definition import Registry
from ledgerflow.operators.service import ApiRole, Operations
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.web import console, instance_routes, operator_routes, schedule_routes
from ledgerflow.web.declare import Server, authorized
from ledgerflow.web.hosts import AllowedHosts
from ledgerflow.web.models import Health
from ledgerflow.web.problems import (
    PROBLEM_MEDIA_TYPE,
    Problem,
    encode,
    problem_body,
    problem_of,
    server_problem,
    title_of,
    validation_problem,
)
from ledgerflow.web.request_guard import RequestGuard

API_TITLE = "Ledgerflow"
API_VERSION = "1"


def create_app(
    store_url: str,
    *,
    registry: Registry | None = None,
    insecure_no_auth: bool = False,
    metrics: Metrics | None = None,
    allowed_hosts: AllowedHosts | None = None,
    cookie_secure: bool = False,
    metrics_token: str | None = None,
    metrics_open: bool = False,
) -> FastAPI:
    """The app over the journal at ``store_url`` (created and migrated unless the URL says
    ``?migrate=false``). ``registry``: the workflows ``POST /v1/instances`` may start.
    ``insecure_no_auth``: every caller is an all-tenant admin (``ledgerflow serve`` allows it
    on a loopback address only), and only loopback host names are answered. ``metrics``:
    what ``/metrics`` exposes (default: a registry of this app's own; ``ledgerflow serve``
    passes the process's). ``allowed_hosts``: the ``Host`` names answered (None: any; with
    ``insecure_no_auth``, loopback names only whatever it says).
    ``cookie_secure``: the console's cookies are always ``Secure``. ``/metrics`` needs
    ``Authorization: Bearer`` ``metrics_token``, or nothing if ``metrics_open``."""
    metrics = metrics or Metrics(CollectorRegistry())
    operations = Operations(store_url, registry=registry, migrate=None, metrics=metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(operations.close)

    app = FastAPI(
        title=API_TITLE,
        version=API_VERSION,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    server = Server(
        operations=operations,
        insecure=insecure_no_auth,
        cookie_secure=cookie_secure,
        metrics_token=metrics_token,
        metrics_open=metrics_open or insecure_no_auth,
    )
    app.state.server = server
    app.include_router(instance_routes.router)
    app.include_router(operator_routes.router)
    app.include_router(schedule_routes.router)
    console.install(app)
    _health(app)
    _openapi(app)
    _error_answers(app)
    hosts = AllowedHosts(loopback_only=True) if insecure_no_auth else allowed_hosts
    app.add_middleware(RequestGuard, server=server, allowed_hosts=hosts or AllowedHosts())
    return app


def _health(app: FastAPI) -> None:
    @app.get("/healthz", response_model=Health, tags=["health"], summary="The process serves")
    def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        # Counts and gauges only, labelled by workflow, participant and reason, never by an
        # instance or a key; yet they count every tenant's work, so they need the scraper's
        # own secret (serve --metrics-token-file), not a tenant's token, unless the server
        # was started with --metrics-open (docs/observability.md).
        server: Server = request.app.state.server
        if not server.metrics_open:
            _check_metrics_token(server, request.headers.get("authorization", ""))
        server.operations.refresh_signals()
        exported = server.operations.metrics
        body = generate_latest(exported.registry) if exported is not None else b""
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["health"],
        summary="The journal can be read and written now (503 when it cannot)",
        responses={503: {"description": "the journal is unavailable"}},
    )
    def readyz(request: Request) -> Response:
        server: Server = request.app.state.server
        try:
            server.operations.ready()
        except LedgerflowError as error:
            _, problem = server_problem(error, instance="/readyz")
            problem.update(status=503, title="Not ready", detail="the journal is unavailable")
            return Response(encode(problem), status_code=503, media_type=PROBLEM_MEDIA_TYPE)
        return JSONResponse({"status": "ok"})


def _check_metrics_token(server: Server, authorization: str) -> None:
    scheme, _, sent = authorization.partition(" ")
    expected = server.metrics_token
    if expected is None:
        raise NotAuthenticatedError(
            "/metrics is closed: start serve with --metrics-token-file FILE (and scrape with "
            "that secret as a bearer token) or with --metrics-open"
        )
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        sent.strip().encode(), expected.encode()
    ):
        raise NotAuthenticatedError("/metrics needs the bearer secret of --metrics-token-file")


def _openapi(app: FastAPI) -> None:
    """``/v1/openapi.json``: generated from the routes' own declarations (OpenAPI 3.1), with
    the problem document and each route's role; it needs a token, like every route but the
    health checks and /metrics."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=API_TITLE,
                version=API_VERSION,
                description="Ledgerflow's HTTP API: see docs/http-api.md.",
                routes=app.routes,
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components["Problem"] = Problem.model_json_schema()
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]  # FastAPI's documented override

    @app.get(
        "/v1/openapi.json",
        include_in_schema=False,
        dependencies=[_viewer],
    )
    def openapi() -> Any:
        return document()


_viewer = Depends(authorized(ApiRole.VIEWER))


def _error_answers(app: FastAPI) -> None:
    def answer(request: Request, status: int, body: dict[str, Any], **headers: str) -> Response:
        if console.is_console(request):
            return console.error_page(request, status, body)
        return Response(
            encode(body), status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers
        )

    @app.exception_handler(LedgerflowError)
    def ledgerflow_error(request: Request, error: LedgerflowError) -> Response:
        status, body = problem_of(error, instance=request.url.path)
        extra = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        return answer(request, status, body, **extra)

    @app.exception_handler(RequestValidationError)
    def invalid(request: Request, error: RequestValidationError) -> Response:
        status, body = validation_problem(error.errors(), instance=request.url.path)
        return answer(request, status, body)

    @app.exception_handler(HTTPException)
    def http_error(request: Request, error: HTTPException) -> Response:
        kind: type[RequestError] = RequestError
        if error.status_code == 404:
            kind = RouteNotFoundError
        elif error.status_code == 405:
            kind = MethodNotAllowedError
            # Starlette names the methods of the first route that matched the path; a path
            # may have several routes (GET and POST /v1/instances): name them all.
            allowed = sorted(
                {
                    method
                    for route in _api_routes()
                    if route.matches(request.scope)[0] is Match.PARTIAL
                    for method in route.methods or ()
                }
            )
            error = HTTPException(405, error.detail, headers={"Allow": ", ".join(allowed)})
        body = problem_body(
            code=kind.code,
            title=title_of(kind),
            status=error.status_code,
            detail=f"{request.method} {request.url.path}: {error.detail}",
            instance=request.url.path,
        )
        return answer(request, error.status_code, body, **(error.headers or {}))

    @app.exception_handler(Exception)
    def server_error(request: Request, error: Exception) -> Response:
        status, body = server_problem(error, instance=request.url.path)
        return answer(request, status, body)


def _api_routes() -> list[APIRoute]:
    """Every API route (the app includes each router's routes under its prefix)."""
    routes = [
        *instance_routes.router.routes,
        *operator_routes.router.routes,
        *schedule_routes.router.routes,
    ]
    return [r for r in routes if isinstance(r, APIRoute)]
