"""The perimeter of the HTTP API: who may call what, what a tenant sees, and what no request
may do to the server however it is crafted. On SQLite and PostgreSQL.

The app runs in-process (Starlette's TestClient) over a real journal built by
``perimeter_world``: two tenants, a parked instance, a token per role.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from perimeter_world import World, build
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import limits
from ledgerflow.operators.service import Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

PROBLEM = "application/problem+json"


class Api:
    def __init__(self, world: World, client: TestClient) -> None:
        self.world = world
        self.client = client

    def call(self, method: str, path: str, *, by: str | None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if by is not None:
            headers["Authorization"] = f"Bearer {self.world.tokens[by]}"
        return self.client.request(method, path, headers=headers, **kwargs)


@pytest.fixture
def api(journal_url: str) -> Iterator[Api]:
    world = build(journal_url)
    with TestClient(create_app(journal_url), raise_server_exceptions=False) as client:
        yield Api(world, client)


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:ledgerflow:error:{code}"
    assert (body["status"], body["code"]) == (status, code)
    assert all(body[field] for field in ("title", "detail", "instance"))
    return body


def test_no_token_is_401_everywhere_but_the_health_checks(api: Api) -> None:
    """Goal: every route but /healthz and /readyz needs a valid token; a revoked, unknown or
    malformed one is refused the same way.

    Method: each path of the OpenAPI document, called without a token: 401 problem with
    WWW-Authenticate: Bearer; a garbage token and a revoked one too; the health checks answer.
    """
    doc = api.call("GET", "/v1/openapi.json", by="victor").json()
    assert api.call("GET", "/v1/openapi.json", by=None).status_code == 401
    for path, operations in doc["paths"].items():
        concrete = path.replace("{instance_id}", api.world.parked).replace("{name}", "x")
        concrete = concrete.replace("{workflow}", "pay").replace("{key}", "k")
        for method in operations:
            response = api.call(method.upper(), concrete, by=None, json={})
            if path in ("/healthz", "/readyz"):
                assert response.status_code == 200
                continue
            _problem(response, 401, "LF704")
            assert response.headers["www-authenticate"] == "Bearer"
    garbage = api.call("GET", "/v1/instances", by=None, headers={"Authorization": "Bearer x"})
    _problem(garbage, 401, "LF704")
    with Operations(api.world.url) as operations:
        victor = operations.tokens().authenticate(api.world.tokens["victor"])
        assert victor.token_id is not None
        operations.tokens().revoke(victor.token_id, revoked_by="test")
    _problem(api.call("GET", "/v1/instances", by="victor"), 401, "LF704")


def test_another_tenants_instance_is_404_never_403(api: Api) -> None:
    """Goal: a token sees and touches only its tenant; another tenant's instance answers as
    if it did not exist, for reading and for every change; listings hide it.

    Method: gail (globex operator) reads, cancels, signals, plans a repair on acme's parked
    instance: each 404 LF400, the same answer as an unknown id; her listing, audit and
    versions name no acme instance; root (admin of '*') sees both tenants.
    """
    parked = api.world.parked
    unknown = api.call("GET", "/v1/instances/wf_nope", by="gail")
    for method, path, body in [
        ("GET", f"/v1/instances/{parked}", None),
        ("GET", f"/v1/instances/{parked}/result", None),
        ("POST", f"/v1/instances/{parked}/cancel", {"reason": "x"}),
        ("POST", f"/v1/instances/{parked}/signals/go", {"event_id": "e"}),
        ("POST", f"/v1/instances/{parked}/repairs/plan", {"kind": "resume", "reason": "x"}),
    ]:
        response = api.call(method, path, by="gail", json=body)
        assert _problem(response, 404, "LF400")["detail"] == unknown.json()["detail"]
    listed = api.call("GET", "/v1/instances", by="gail").json()["items"]
    assert {i["tenant"] for i in listed} == {"globex"}
    assert api.call("GET", "/v1/instances?tenant=acme", by="gail").json()["items"] == []
    audit = api.call("GET", "/v1/audit", by="gail").json()["items"]
    assert parked not in {a["instance_id"] for a in audit}
    by_key = api.call("GET", "/v1/workflows/pay/keys/order-2?tenant=acme", by="gail")
    _problem(by_key, 404, "LF400")
    everyone = api.call("GET", "/v1/instances", by="root").json()["items"]
    assert {i["tenant"] for i in everyone} == {"acme", "globex"}


def test_each_route_holds_its_declared_role(api: Api) -> None:
    """Goal: roles are a ladder, each route declares its minimum in the OpenAPI document, and
    a token below it is refused (403), whatever it asks.

    Method: every operation of the document has x-required-role; a viewer's cancel, signal,
    start and repair are 403 LF701 and change nothing; a signaller may signal but not cancel.
    """
    doc = api.call("GET", "/v1/openapi.json", by="victor").json()
    roles = {
        (method, path): op.get("x-required-role")
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    }
    assert all(role for (m, p), role in roles.items() if p.startswith("/v1")), roles
    assert roles["post", "/v1/instances/{instance_id}/cancel"] == "operator"
    assert roles["post", "/v1/instances/{instance_id}/signals/{name}"] == "signaller"
    assert roles["get", "/v1/instances"] == "viewer"
    parked = api.world.parked
    for method, path, body in [
        ("POST", f"/v1/instances/{parked}/cancel", {"reason": "x"}),
        ("POST", f"/v1/instances/{parked}/signals/go", {"event_id": "e"}),
        ("POST", "/v1/instances", {"workflow": "pay", "key": "v-1"}),
        ("POST", f"/v1/instances/{parked}/repairs", {"kind": "resume", "reason": "x"}),
    ]:
        _problem(api.call(method, path, by="victor", json=body), 403, "LF701")
    _problem(
        api.call("POST", f"/v1/instances/{parked}/cancel", by="sam", json={"reason": "x"}),
        403,
        "LF701",
    )
    shown = api.call("GET", f"/v1/instances/{parked}", by="victor").json()
    assert shown["instance"]["cancel_requested_at"] is None
    assert shown["inbox"] == []


def test_every_change_is_audited_with_its_principal(api: Api) -> None:
    """Goal: a cancel and a repair through the API are on the audit log under the token's
    name and role; the repair's actor is the principal whatever the body says.

    Method: olga plans (nothing written) and applies resolve-effect with resume on the parked
    instance, then cancels the waiting one; the audit log holds exactly those two changes,
    by olga as operator.
    """
    parked, waiting = api.world.parked, api.world.waiting
    before = {a["audit_id"] for a in api.call("GET", "/v1/audit", by="olga").json()["items"]}
    repair = {
        "kind": "resolve-effect",
        "seq": 1,
        "applied": True,
        "evidence": {"statement": "r-17"},
        "resume": True,
        "reason": "the bank statement shows it",
    }
    plan = api.call("POST", f"/v1/instances/{parked}/repairs/plan", by="olga", json=repair)
    assert plan.status_code == 200, plan.text
    assert plan.json()["outcome"] == "dry-run"
    planned = {**repair, "planned_generation": plan.json()["generation"]}
    applied = api.call("POST", f"/v1/instances/{parked}/repairs", by="olga", json=planned)
    assert (applied.status_code, applied.json()["outcome"]) == (200, "applied"), applied.text
    stale = api.call("POST", f"/v1/instances/{parked}/repairs", by="olga", json=planned)
    assert stale.status_code == 409
    cancel = api.call("POST", f"/v1/instances/{waiting}/cancel", by="olga", json={"reason": "r"})
    assert cancel.status_code == 200, cancel.text
    audit = api.call("GET", "/v1/audit", by="olga").json()["items"]
    new = [
        (a["actor"], a["role"], a["kind"], a["outcome"])
        for a in audit
        if a["audit_id"] not in before
    ]
    assert ("olga", "operator", "resolve-effect", "applied") in new
    assert ("olga", "operator", "cancel", "applied") in new
    assert all(actor == "olga" for actor, *_ in new)


def test_a_replayed_idempotency_key_gives_the_first_answer_or_is_refused(api: Api) -> None:
    """Goal: the same key and body replay the first answer (nothing is done twice); the same
    key with another body is refused (409, LF304); keys are per token.

    Method: start with key K twice: the second answer is the first (201, replayed header),
    one audit record; K with another body: 409 and no instance for it; the same K from
    another token is a new request.
    """
    body = {"workflow": "pay", "key": "idem-1", "input": {"amount": 1}}
    headers = {"Idempotency-Key": "K-1"}
    first = api.call("POST", "/v1/instances", by="sam", json=body, headers=headers)
    assert first.status_code == 422  # the server carries no workflow code: still an answer
    again = api.call("POST", "/v1/instances", by="sam", json=body, headers=headers)
    assert (again.status_code, again.json()) == (first.status_code, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    other = api.call(
        "POST", "/v1/instances", by="sam", json={**body, "key": "idem-2"}, headers=headers
    )
    body_problem = _problem(other, 409, "LF304")
    assert "another request" in body_problem["detail"]
    parked = api.world.parked
    cancel = {"reason": "stop"}
    once = api.call(
        "POST", f"/v1/instances/{api.world.waiting}/cancel", by="olga", json=cancel, headers=headers
    )
    twice = api.call(
        "POST", f"/v1/instances/{api.world.waiting}/cancel", by="olga", json=cancel, headers=headers
    )
    assert once.status_code == twice.status_code == 200
    assert once.json() == twice.json()
    audit = api.call("GET", f"/v1/audit?instance_id={api.world.waiting}&kind=cancel", by="olga")
    assert len(audit.json()["items"]) == 1
    assert parked


def test_error_routes_answer_problems(api: Api) -> None:
    """Goal: 404 (route), 405 (method, with Allow), 415 and 422 are problem documents.

    Method: an unknown path, DELETE on /v1/instances, a form body, a bad query value.
    """
    _problem(api.call("GET", "/v2/nothing", by="olga"), 404, "LF121")
    wrong = _problem(api.call("DELETE", "/v1/instances", by="olga"), 405, "LF122")
    assert wrong["instance"] == "/v1/instances"
    assert api.call("DELETE", "/v1/instances", by="olga").headers["allow"] == "GET, POST"
    form = api.call(
        "POST",
        "/v1/instances",
        by="olga",
        content=b"a=b",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    _problem(form, 415, "LF123")
    _problem(api.call("GET", "/v1/instances?limit=0", by="olga"), 422, "LF110")
    _problem(api.call("GET", "/v1/instances?cursor=!!", by="olga"), 422, "LF124")
    _problem(api.call("GET", "/v1/instances/a%00b", by="olga"), 422, "LF110")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"workflow": "pay\\u0000", "key": "k"}', "NUL"),
        (b'{"workflow": "pay", "key": "\\udfff"}', "lone surrogate"),
        (b'{"workflow": "pay", "key": "k", "version": 100000000000000000000000000000}', "64 bits"),
        (b'{"workflow": "pay", "key": "k", "version": 1e29}', "valid integer"),
        (b'{"workflow": "pay", "key": "k", "input": 1e999}', "finite"),
        (b'{"workflow": "pay", "key": "k", "input": -Infinity}', "finite"),
    ],
)
def test_crafted_bodies_are_422(api: Api, content: bytes, needle: str) -> None:
    """Goal: a NUL, a lone surrogate, an integer past 64 bits or a non-finite number never
    reaches the journal: 422, on either backend (PostgreSQL once answered 503 with SQL).
    Method: POST each to the start route as a signaller."""
    response = api.call(
        "POST",
        "/v1/instances",
        by="sam",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert needle in _problem(response, 422, "LF110")["detail"]


def test_oversized_and_deep_bodies_are_refused_without_growing(api: Api) -> None:
    """Goal: a body past REQUEST_BODY_BYTES_MAX is 413 and never buffered whole; one nested
    past JSON_DEPTH_MAX is 422; neither costs memory beyond a bound.

    Method: with tracemalloc on, POST a declared 50 MB body (streamed in chunks, never built in
    memory here), a 3 MB body with no Content-Length, and 100,000 '['; 413, 413, 422; the
    peak traced allocation stays under 3 x REQUEST_BODY_BYTES_MAX.
    """
    chunk = b" " * 65536

    def stream(total: int) -> Iterator[bytes]:
        sent = 0
        while sent < total:
            yield chunk
            sent += len(chunk)

    path = f"/v1/instances/{api.world.waiting}/signals/go"
    tracemalloc.start()
    try:
        declared = api.call(
            "POST", path, by="sam", content=stream(50_000_000),
            headers={"content-type": "application/json", "content-length": "50000000"},
        )  # fmt: skip
        streamed = api.call(
            "POST", path, by="sam", content=stream(3_000_000),
            headers={"content-type": "application/json"},
        )  # fmt: skip
        deep = api.call(
            "POST", path, by="sam", content=b"[" * 100_000,
            headers={"content-type": "application/json"},
        )  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _problem(declared, 413, "LF111")
    _problem(streamed, 413, "LF111")
    assert "nests 100000 levels" in _problem(deep, 422, "LF110")["detail"]
    assert peak < 3 * limits.REQUEST_BODY_BYTES_MAX, peak


def test_the_openapi_document_is_3_1_and_describes_problems(api: Api) -> None:
    """Goal: /v1/openapi.json is OpenAPI 3.1, every /v1 operation documents its problems as
    application/problem+json and POSTs take an Idempotency-Key.

    Method: read the document and walk its operations.
    """
    doc = api.call("GET", "/v1/openapi.json", by="victor").json()
    assert doc["openapi"].startswith("3.1")
    assert "Problem" in doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, op in ops.items():
            assert "application/problem+json" in op["responses"]["401"]["content"], (method, path)
            if method == "post":
                names = {p["name"] for p in op.get("parameters", [])}
                assert "Idempotency-Key" in names, path
    assert json.dumps(doc)


def test_readyz_is_503_only_when_the_journal_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: /readyz proves the journal can be read and written, and is the only 503; while
    the journal is locked a change is a 500 problem naming LF201 with no SQL, and /healthz
    still answers.

    Method: a SQLite journal (busy timeout shortened to 0.2 s for the test); another
    connection holds its write lock (BEGIN EXCLUSIVE): /readyz 503, a cancel 500 LF201 whose
    body holds no SQL word, /healthz 200; once the lock is released /readyz is 200 again.
    """
    monkeypatch.setattr(limits, "SQLITE_BUSY_TIMEOUT_MS", 200)
    # Every call probes here (the bound that spares the journal is tested on its own).
    monkeypatch.setattr(limits, "READY_PROBE_SECONDS", 0.0)
    url = f"sqlite:///{tmp_path}/ready.db"
    world = build(url)
    with TestClient(create_app(url), raise_server_exceptions=False) as client:
        api = Api(world, client)
        assert client.get("/readyz").status_code == 200
        holder = sqlite3.connect(tmp_path / "ready.db", timeout=0)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            assert client.get("/readyz").status_code == 503
            assert client.get("/healthz").status_code == 200
            cancel = api.call(
                "POST", f"/v1/instances/{world.waiting}/cancel", by="olga", json={"reason": "r"}
            )
            body = _problem(cancel, 500, "LF201")
            assert not re.search(r"SQLite|UPDATE|INSERT|lf_", json.dumps(body))
        finally:
            holder.rollback()
            holder.close()
        assert client.get("/readyz").status_code == 200


def test_serve_refuses_no_auth_off_loopback(tmp_path: Path) -> None:
    """Goal: a server without authentication is never reachable from another machine.
    Method: `ledgerflow serve --insecure-no-auth --host 0.0.0.0` is a usage error (LF104);
    is_loopback accepts 127.0.0.1, ::1 and localhost only."""
    from click.testing import CliRunner

    from ledgerflow.cli.main import cli
    from ledgerflow.cli.serve import is_loopback
    from ledgerflow.errors import CommandLineError

    runner = CliRunner()
    db = f"sqlite:///{tmp_path}/x.db"
    refused = runner.invoke(cli, ["serve", "--db", db, "--host", "0.0.0.0", "--insecure-no-auth"])
    assert isinstance(refused.exception, CommandLineError)
    assert "loopback" in str(refused.exception)
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.1")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_start_and_callback_through_the_api(journal_url: str) -> None:
    """Goal: with the workflows it carries (serve --registry), the API starts an instance in
    the token's tenant (201, then 200 for the same key), refuses another tenant (403), and a
    participant's callback by idempotency key reaches only an effect of the token's tenant
    (that effect completed long ago: the callback is kept and refused as late, the same answer
    when repeated); both are audited under the principal.

    Method: an app with perimeter_world's registry; sam (signaller, acme) starts 'pay' twice,
    then for tenant globex; gail (globex) sends a callback for acme's effect: 404; sam's is
    kept and refused (409 late, twice); the audit log names sam for the start and callback.
    """
    from perimeter_world import registry

    world = build(journal_url)
    with TestClient(create_app(journal_url, registry=registry)) as client:
        api = Api(world, client)
        body = {"workflow": "pay", "key": "api-1", "input": {"amount": 3}}
        first = api.call("POST", "/v1/instances", by="sam", json=body)
        again = api.call("POST", "/v1/instances", by="sam", json=body)
        assert (first.status_code, again.status_code) == (201, 200), first.text
        assert first.json()["instance"]["tenant"] == "acme"
        elsewhere = api.call("POST", "/v1/instances", by="sam", json={**body, "tenant": "globex"})
        _problem(elsewhere, 403, "LF701")
        key = api.call("GET", f"/v1/instances/{world.waiting}", by="sam").json()["effects"][0]
        callback = {"idempotency_key": key["idempotency_key"], "applied": True, "evidence": {}}
        _problem(api.call("POST", "/v1/effects/completion", by="gail", json=callback), 404, "LF400")
        kept = api.call("POST", "/v1/effects/completion", by="sam", json=callback)
        assert _problem(kept, 409, "LF305")["delivery"]["outcome"] == "late"
        repeat = api.call("POST", "/v1/effects/completion", by="sam", json=callback)
        assert _problem(repeat, 409, "LF305")["delivery"]["outcome"] == "duplicate"
        audit = api.call("GET", "/v1/audit?actor=sam", by="olga").json()["items"]
        assert {(a["kind"], a["outcome"]) for a in audit} >= {
            ("start", "applied"),
            ("start", "no-op"),
            ("complete-effect", "refused"),
        }
