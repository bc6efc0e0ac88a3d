"""The console in-process: sign-in and sessions, CSRF on every form, the role ladder, tenant
scoping and escaping of every field, over a real SQLite journal (``perimeter_world``).

The browser test (``test_console_browser.py``) walks the same pages in Chromium; these pin the
rules one by one.
"""

from __future__ import annotations

import re
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from perimeter_world import MARKUP_KEY, World, build
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.errors import NotAuthenticatedError
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.ids import WorkerId
from ledgerflow.model.routing import Served
from ledgerflow.operators.service import Operations
from ledgerflow.storage import open_store
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(f"sqlite:///{tmp_path}/console.db")


@pytest.fixture
def client(world: World) -> Iterator[TestClient]:
    with TestClient(create_app(world.url), follow_redirects=False) as c:
        yield c


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; return the session's CSRF token."""
    form = client.get("/console/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    done = client.post("/console/sign-in", data={"token": token, "csrf": csrf.group(1)})
    assert done.status_code == 303, done.text
    assert done.headers["location"] == "/console"
    cookie = done.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    page = client.get("/console/instances")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def test_pages_need_a_session_and_a_bad_token_signs_nobody_in(
    client: TestClient, world: World
) -> None:
    """Goal: every page redirects to sign-in without a session; a wrong token, or a sign-in
    form posted without its own CSRF cookie (a login forged by another site), signs nobody in.

    Method: GET each page: 303 to /console/sign-in; post a garbage token; post a real token
    with a made-up CSRF value: both back to the form, no session cookie.
    """
    for page in ("/console/instances", "/console/attention", "/console/audit",
                 f"/console/instances/{world.parked}", "/console/versions"):  # fmt: skip
        response = client.get(page)
        assert (response.status_code, response.headers["location"]) == (303, "/console/sign-in")
    form = client.get("/console/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    bad = client.post("/console/sign-in", data={"token": "lft_nope", "csrf": csrf.group(1)})
    assert "failed=true" in bad.headers["location"]
    client.cookies.clear()
    forged = client.post(
        "/console/sign-in", data={"token": world.tokens["olga"], "csrf": "made-up"}
    )
    assert "failed=true" in forged.headers["location"]
    assert "lf_session" not in forged.headers.get("set-cookie", "")


def test_every_field_renders_inert(client: TestClient, world: World) -> None:
    """Goal: markup in a business key is text, terminal escapes and a bidi override in the
    ledger are visible escapes, and no page may run a script at all.

    Method: sign in, open the instance list and both instances; the raw markup never appears,
    its escaped form does; no ESC or U+202E reaches the HTML; the CSP forbids scripts.
    """
    sign_in(client, world.tokens["olga"])
    for page in ("/console/instances", f"/console/instances/{world.parked}",
                 f"/console/instances/{world.waiting}", "/console/attention"):  # fmt: skip
        html = client.get(page)
        assert html.status_code == 200, html.text
        assert "<script>alert" not in html.text
        assert "onerror=alert(1)>" not in html.text
        assert "\x1b" not in html.text
        assert "\u202e" not in html.text
        assert "default-src 'none'" in html.headers["content-security-policy"]
    parked = client.get(f"/console/instances/{world.parked}").text
    assert "&lt;script&gt;alert(" in parked
    assert "\\x1b[31m" in parked
    assert "\\u202e" in parked
    assert "UNKNOWN" in parked
    assert MARKUP_KEY not in parked


def test_forms_need_the_session_csrf_token_and_the_role(client: TestClient, world: World) -> None:
    """Goal: a forged POST (no or wrong CSRF token) changes nothing; a viewer sees no repair
    or cancel form and is refused (403) even with a valid CSRF token; a cross-tenant instance
    is 404.

    Method: as olga, POST a cancel without and with a wrong CSRF token: 403, no cancel
    request (without it, 403 even when another field is missing too: the token is checked
    before anything else of the form); as victor (viewer), the instance page has no forms,
    his POST with his own CSRF token is 403; as gail (globex), acme's instance page is 404.
    """
    sign_in(client, world.tokens["olga"])
    path = f"/console/instances/{world.waiting}/cancel"
    assert client.post(path, data={"reason": "forged"}).status_code == 403
    assert client.post(path, data={}).status_code == 403
    assert client.post(path, data={"reason": "forged", "csrf": "wrong"}).status_code == 403
    page = client.get(f"/console/instances/{world.waiting}").text
    assert "requested" not in page.split("<dt>Cancel</dt>")[1].split("</dd>")[0]
    client.cookies.clear()
    csrf = sign_in(client, world.tokens["victor"])
    page = client.get(f"/console/instances/{world.parked}").text
    assert 'id="repair-form"' not in page
    assert 'id="cancel-form"' not in page
    refused = client.post(
        f"/console/instances/{world.parked}/repairs/plan",
        data={"csrf": csrf, "kind": "resume", "reason": "x"},
    )
    assert refused.status_code == 403
    client.cookies.clear()
    sign_in(client, world.tokens["gail"])
    assert client.get(f"/console/instances/{world.parked}").status_code == 404


def test_plan_shows_a_diff_and_apply_needs_the_planned_generation(
    client: TestClient, world: World
) -> None:
    """Goal: a repair is planned (a diff, nothing written) and applied only on confirmation,
    only from the generation the diff was made at; the audit record names the principal.

    Method: as olga, plan resolve-effect on the parked instance: the page shows removed and
    added lines and the instance is unchanged; confirm with a wrong generation: 409, nothing
    applied; confirm with the shown one: applied, the audit table names olga.
    """
    csrf = sign_in(client, world.tokens["olga"])
    fields = {
        "csrf": csrf, "kind": "resolve-effect", "seq": "1", "applied": "yes",
        "evidence": '{"statement": "r-17"}', "resume": "yes", "compensate": "yes",
        "reason": "the statement shows the charge", "status": "", "result": "",
    }  # fmt: skip
    plan = client.post(f"/console/instances/{world.parked}/repairs/plan", data=fields)
    assert plan.status_code == 200, plan.text
    assert 'class="diff-del"' in plan.text
    assert 'class="diff-add"' in plan.text
    generation = re.search(r'name="planned_generation" value="(\d+)"', plan.text)
    assert generation is not None
    assert "MANUAL_INTERVENTION" in client.get(f"/console/instances/{world.parked}").text
    apply = f"/console/instances/{world.parked}/repairs"
    stale = client.post(apply, data={**fields, "planned_generation": "999"})
    assert stale.status_code == 409
    done = client.post(apply, data={**fields, "planned_generation": generation.group(1)})
    assert done.status_code == 303, done.text
    page = client.get(done.headers["location"]).text
    assert "Repair applied: audit record #" in page
    audit = page.split('id="audit"')[1]
    assert "olga" in audit
    assert "resolve-effect" in audit


def test_sign_out_ends_the_session(client: TestClient, world: World) -> None:
    """Goal: signing out ends the session on the server (the cookie is worth nothing after).
    Method: sign in, keep the cookie, sign out, send the old cookie again: redirected."""
    csrf = sign_in(client, world.tokens["olga"])
    cookie = client.cookies.get("lf_session")
    assert cookie
    assert client.post("/console/sign-out", data={"csrf": csrf}).status_code == 303
    client.cookies.set("lf_session", cookie, path="/console")
    replay = client.get("/console/instances")
    assert (replay.status_code, replay.headers["location"]) == (303, "/console/sign-in")


def test_every_form_without_its_csrf_field_is_403(client: TestClient, world: World) -> None:
    """Goal: a console form that changes something, posted without its CSRF field at all, is
    refused 403 as documented (not a validation error), whatever else it carries, and changes
    nothing; the sign-in form without one signs nobody in.

    Method: as olga, POST each form (sign-out, plan, apply, cancel) with all its other fields
    and no csrf: 403; the session still works and the instances are unchanged; a sign-in
    without its csrf field goes back to the form with no session cookie.
    """
    sign_in(client, world.tokens["olga"])
    parked, waiting = world.parked, world.waiting
    repair = {"kind": "resume", "reason": "forged", "seq": "", "applied": "", "evidence": "",
              "result": "", "status": "", "compensate": "yes", "resume": ""}  # fmt: skip
    for path, form in (
        ("/console/sign-out", {}),
        (f"/console/instances/{parked}/repairs/plan", repair),
        (f"/console/instances/{parked}/repairs", {**repair, "planned_generation": "0"}),
        (f"/console/instances/{waiting}/cancel", {"reason": "forged", "compensate": "yes"}),
    ):
        response = client.post(path, data=form)
        assert response.status_code == 403, (path, response.text)
        assert "CSRF" in response.text
    assert client.get("/console/instances").status_code == 200
    assert "MANUAL_INTERVENTION" in client.get(f"/console/instances/{parked}").text
    page = client.get(f"/console/instances/{waiting}").text
    assert "requested" not in page.split("<dt>Cancel</dt>")[1].split("</dd>")[0]
    client.cookies.clear()
    client.get("/console/sign-in")
    bare = client.post("/console/sign-in", data={"token": world.tokens["olga"]})
    assert (bare.status_code, "failed=true" in bare.headers["location"]) == (303, True)
    assert "lf_session" not in bare.headers.get("set-cookie", "")


def test_signing_in_ends_the_browsers_previous_session(client: TestClient, world: World) -> None:
    """Goal: signing in ends the session the browser held before: its row is deleted, so the
    old cookie (wherever a copy of it went) signs nobody in.

    Method: sign in as olga and keep her cookie; sign in as victor in the same browser; the
    journal holds one session, victor's; olga's old cookie, sent again, is redirected to
    sign-in.
    """
    sign_in(client, world.tokens["olga"])
    old = client.cookies.get("lf_session")
    assert old
    sign_in(client, world.tokens["victor"])
    assert client.cookies.get("lf_session") != old
    path = world.url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    try:
        sessions = conn.execute("SELECT token_id FROM lf_console_sessions").fetchall()
    finally:
        conn.close()
    with Operations(world.url) as operations:
        victor = operations.tokens().authenticate(world.tokens["victor"]).token_id
        with pytest.raises(NotAuthenticatedError):
            operations.tokens().session(old)
    assert sessions == [(victor,)]
    client.cookies.clear()
    client.cookies.set("lf_session", old, path="/console")
    replay = client.get("/console/instances")
    assert (replay.status_code, replay.headers["location"]) == (303, "/console/sign-in")


def test_pages_say_what_no_live_worker_serves(client: TestClient, world: World) -> None:
    """Goal: nothing waits in silence in the console either. With a live worker serving only
    other code of pay v1 (as after a deploy), the waiting instance's page says it is pinned to
    code no live worker serves and how it moves, and the Versions page lists its definition
    as in flight with no live worker; once a worker serves its code, both say nothing."""
    pinned = client_side_fingerprint(world)
    register(world.url, "new-code", Served("pay", 1, "f" * 32))
    sign_in(client, world.tokens["olga"])
    page = client.get(f"/console/instances/{world.waiting}").text
    assert 'id="unserved"' in page
    assert f"pinned to pay v1 (fingerprint {pinned}), which no live worker serves" in page
    assert "ledgerflow versions upgrade pay@1 MODULE:REGISTRY" in page
    versions = client.get("/console/versions").text
    table = versions[versions.index('<table id="unserved">') : versions.index("<h2>Workers")]
    assert f"<code>{pinned}</code>" in table
    register(world.url, "old-code", Served("pay", 1, pinned))
    assert 'id="unserved"' not in client.get(f"/console/instances/{world.waiting}").text
    assert 'id="unserved-none"' in client.get("/console/versions").text


def client_side_fingerprint(world: World) -> str:
    with Operations(world.url) as operations:
        return operations.detail(world.waiting).instance.fingerprint


def register(url: str, worker_id: str, serves: Served) -> None:
    """A live worker in the journal's registry (as a worker process announces itself)."""
    store = open_store(url)
    try:
        now = time.time()
        record = WorkerRecord(
            worker_id=WorkerId(worker_id),
            host="h",
            pid=1,
            started_at=now,
            slots=1,
            heartbeat_at=now,
            serves=(serves,),
        )
        store.register_worker(record, now=now)
    finally:
        store.close()
