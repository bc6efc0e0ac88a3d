"""The request guard's order and bounds, in-process (issue 22, items 1, 3 and 8): fast checks
of what tests/web/test_adversarial_bodies.py, test_slow_clients.py and test_serve_perimeter.py
prove against real server processes.

The app runs under Starlette's TestClient over a real SQLite journal with real tokens.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_probes import make_token
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import limits
from ledgerflow.web import AllowedHosts, create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

JSON = {"content-type": "application/json"}


@pytest.fixture
def journal(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path}/guard.db"
    return url, make_token(url, name="olga", role="operator")


@pytest.fixture
def client(journal: tuple[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(journal[0]), follow_redirects=False) as test_client:
        yield test_client


def test_credentials_are_checked_before_the_body_is_read(
    client: TestClient, journal: tuple[str, str]
) -> None:
    """Goal: a request without valid credentials is refused for that, whatever its body: the
    old guard read and judged the body first (422 for bad JSON, 413 for a large one).

    Method: POST bodies that are not JSON, nested past the bound, and larger than the
    anonymous bound, to /v1 without a token and with a wrong one: 401 LF704 each; a console
    form without a session: the redirect to sign-in; with the token, the same bad JSON is 422.
    """
    bodies = [b"{not json", b"[" * 100_000, b'"' + b'\\"' * 20_000, b"1" * 10_000]
    for body in bodies:
        for headers in (JSON, {**JSON, "authorization": "Bearer lft_nope_nope"}):
            answer = client.post("/v1/instances", content=body, headers=headers)
            assert answer.status_code == 401, (body[:10], answer.text)
            assert answer.json()["code"] == "LF704"
    form = client.post(
        "/console/instances/wf_x/cancel",
        content=b"reason=" + b"x" * 10_000,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert (form.status_code, form.headers["location"]) == (303, "/console/sign-in")
    signed = {**JSON, "authorization": f"Bearer {journal[1]}"}
    refused = client.post("/v1/instances", content=b"{not json", headers=signed)
    assert (refused.status_code, refused.json()["code"]) == (422, "LF110")


def test_a_request_without_credentials_has_its_body_bounded_small(client: TestClient) -> None:
    """Goal: what needs no credentials (the sign-in form, the health checks) is read only up
    to ANONYMOUS_BODY_BYTES_MAX: a bigger body is 413 LF111 saying so, from its length or
    from the bytes received.

    Method: sign-in forms of the bound and one byte past it, declared and streamed.
    """
    bound = limits.ANONYMOUS_BODY_BYTES_MAX
    form = {"content-type": "application/x-www-form-urlencoded"}
    at_bound = client.post("/console/sign-in", content=b"x" * bound, headers=form)
    assert at_bound.status_code != 413
    for content in (b"x" * (bound + 1), iter([b"x" * bound, b"x"])):
        past = client.post("/console/sign-in", content=content, headers=form)
        assert (past.status_code, past.json()["code"]) == (413, "LF111"), past.text
        assert "without credentials" in past.json()["detail"]


def test_only_the_allowed_hosts_are_answered(journal: tuple[str, str]) -> None:
    """Goal: an app given allowed hosts answers those names (any port, any case) and refuses
    others with 421 LF125, before credentials are looked at; without authentication it
    answers loopback names only, whatever it was given.

    Method: an app allowing api.example.com; one without authentication allowing '*'.
    """
    url, token = journal
    app = create_app(url, allowed_hosts=AllowedHosts(["api.example.com"]))
    with TestClient(app, base_url="http://API.example.com:8443") as client:
        headers = {"authorization": f"Bearer {token}"}
        assert client.get("/v1/instances", headers=headers).status_code == 200
        for host in ("evil.example", "localhost", "api.example.com.evil.example"):
            refused = client.get("/v1/instances", headers={"host": host})
            assert (refused.status_code, refused.json()["code"]) == (421, "LF125"), host
    insecure = create_app(url, insecure_no_auth=True, allowed_hosts=AllowedHosts(["*"]))
    with TestClient(insecure, base_url="http://evil.example") as client:
        assert client.get("/healthz").status_code == 421
        assert client.get("/healthz", headers={"host": "127.0.0.1:9"}).status_code == 200


def test_cookie_secure_makes_every_console_cookie_secure(journal: tuple[str, str]) -> None:
    """Goal: with cookie_secure the sign-in form's cookie and the session cookie carry Secure
    over plain http; without it they do not (over plain http).

    Method: sign in through each app, reading Set-Cookie.
    """
    url, token = journal
    for secure in (True, False):
        with TestClient(create_app(url, cookie_secure=secure), follow_redirects=False) as client:
            form = client.get("/console/sign-in")
            csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            done = client.post(
                "/console/sign-in",
                data={"token": token, "csrf": csrf},
                headers={"cookie": f"lf_sign_in={form.cookies['lf_sign_in']}"},
            )
            assert done.status_code == 303
            cookies = [*form.headers.get_list("set-cookie"), *done.headers.get_list("set-cookie")]
            assert cookies
            assert all(("; secure" in c.lower()) is secure for c in cookies), cookies
