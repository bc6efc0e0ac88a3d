"""Issue 22, items 3 and 8: who may address ``ledgerflow serve``, and how it listens.

- Item 3: ``--insecure-no-auth`` accepted any ``Host``, so a page that rebinds its own name to
  127.0.0.1 could read and act on every tenant. It answers loopback names only now (421
  LF125 otherwise, API and console alike); a loopback ``--host`` does so by default too, and
  ``--allowed-host`` names the hosts otherwise.
- Item 8: ``--host ::1`` (the docs name it) could not be bound; the console's cookies get
  ``Secure`` behind a TLS proxy that says so (``--forwarded-allow-ips``) or always
  (``--cookie-secure``); ``/metrics`` takes the scraper's own secret (``--metrics-token-file``)
  instead of being open to anyone, unless ``--metrics-open``.

Against real server processes (one per configuration, shared by the module's tests), except
for the rules of ``allowed_hosts``, read directly.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from serve_probes import make_token

from ledgerflow.cli.main import cli
from ledgerflow.errors import CommandLineError

pytestmark = pytest.mark.slow

METRICS_SECRET = "scraper-secret-0123456789abcdef"


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def insecure(module_processes: Any) -> str:
    """A server without authentication (on 127.0.0.1): its URL."""
    url, _ = module_processes.server("--insecure-no-auth")
    return str(url)


@pytest.fixture(scope="module")
def guarded(module_processes: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A server with tokens (on 127.0.0.1, trusting the default proxies) whose /metrics takes
    a secret; its URL and an operator's token."""
    secret = tmp_path_factory.mktemp("metrics") / "token"
    secret.write_text(METRICS_SECRET + "\n")
    token = make_token(module_processes.db_url, name="olga", role="operator")
    url, _ = module_processes.server("--metrics-token-file", str(secret))
    return {"url": url, "token": token}


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1]


def test_without_authentication_only_loopback_names_are_answered(insecure: str) -> None:
    """Goal: a rebound page gets nothing from a server without authentication: a foreign Host
    is 421 LF125 on the API, the console and the health check alike, while every loopback
    name (with or without a port) is answered.

    Method: the same three paths with Host attacker.example:PORT, attacker.example and an
    IPv6 foreign address; then 127.0.0.1:PORT, localhost, 127.0.0.2:PORT, [::1]:PORT and
    app.localhost:PORT.
    """
    port = _port(insecure)
    paths = ("/v1/instances", "/console/instances", "/healthz")
    for host in (f"attacker.example:{port}", "attacker.example", f"[2001:db8::1]:{port}"):
        for path in paths:
            answer = httpx.get(f"{insecure}{path}", headers={"Host": host}, timeout=10)
            assert answer.status_code == 421, (host, path, answer.text)
            assert answer.json()["code"] == "LF125"
    loopback = (f"127.0.0.1:{port}", "localhost", f"127.0.0.2:{port}", f"[::1]:{port}")
    for host in (*loopback, f"app.localhost:{port}"):
        for path in paths:
            answer = httpx.get(f"{insecure}{path}", headers={"Host": host}, timeout=10)
            assert answer.status_code == 200, (host, path, answer.text)


def test_serve_listens_on_the_ipv6_loopback(module_processes: Any) -> None:
    """Goal: `--host ::1` (which the docs name for --insecure-no-auth) listens, on IPv6.
    Method: its LISTENING line brackets the address; /healthz and the API answer there."""
    if not _has_ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    url, _ = module_processes.server("--host", "::1", "--insecure-no-auth")
    assert re.fullmatch(r"http://\[::1\]:\d+", url), url
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{url}/v1/instances", timeout=10).json()["items"] == []


def test_a_loopback_server_answers_loopback_names_by_default_and_allowed_hosts_otherwise(
    guarded: dict[str, str],
) -> None:
    """Goal: with tokens too, a server on a loopback address answers loopback names only
    unless told otherwise; --allowed-host names the hosts exactly (port ignored, '*' any);
    a server on another address answers any name unless given a list; without
    authentication no foreign name may be allowed.

    Method: the guarded server (127.0.0.1, no --allowed-host) refuses a foreign Host even
    with a valid token; the rules of ``allowed_hosts`` are read directly, and ``serve``
    refuses --allowed-host of a foreign name with --insecure-no-auth (LF104).
    """
    from ledgerflow.web import allowed_hosts

    url, token = guarded["url"], guarded["token"]
    headers = {"Authorization": f"Bearer {token}"}
    foreign = httpx.get(
        f"{url}/v1/instances", headers={**headers, "Host": "evil.example"}, timeout=10
    )
    assert foreign.status_code == 421
    assert httpx.get(f"{url}/v1/instances", headers=headers, timeout=10).status_code == 200
    loopback = allowed_hosts((), listening_on="127.0.0.1", insecure=False)
    assert loopback.allows("localhost:8080")
    assert not loopback.allows("evil.example")
    listed = allowed_hosts(
        ("api.example.com", "API2.example.com"), listening_on="127.0.0.1", insecure=False
    )
    assert listed.allows("api.example.com:443")
    assert listed.allows("api2.example.com")
    assert not listed.allows("localhost")
    assert not listed.allows("api.example.com.evil.example")
    assert allowed_hosts(("*",), listening_on="127.0.0.1", insecure=False).allows("anything")
    assert allowed_hosts((), listening_on="0.0.0.0", insecure=False).allows("anything")
    with pytest.raises(CommandLineError, match="loopback host names only"):
        allowed_hosts(("api.example.com",), listening_on="127.0.0.1", insecure=True)


def _cookie(answer: httpx.Response, name: str) -> str:
    headers = [v for v in answer.headers.get_list("set-cookie") if v.startswith(f"{name}=")]
    assert len(headers) == 1, answer.headers
    return headers[0]


def _signed_in(url: str, token: str, extra: dict[str, str]) -> tuple[str, str]:
    """The sign-in form's cookie and the session cookie, signing in with ``extra`` headers.
    The form's cookie is sent back by hand: the client keeps a Secure cookie for https, and
    here the https is the proxy's."""
    with httpx.Client(base_url=url, headers=extra, timeout=10) as client:
        form = client.get("/console/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        sign_in = _cookie(form, "lf_sign_in")
        client.cookies.clear()
        done = client.post(
            "/console/sign-in",
            data={"token": token, "csrf": csrf.group(1)},
            headers={"Cookie": sign_in.split(";", 1)[0]},
            follow_redirects=False,
        )
        assert done.status_code == 303, done.text
        assert done.headers["location"].endswith("/console")
    return sign_in, _cookie(done, "lf_session")


def test_console_cookies_are_secure_behind_a_trusted_tls_proxy(
    guarded: dict[str, str], module_processes: Any
) -> None:
    """Goal: the console's cookies carry Secure when the browser's request came over https:
    directly, through a proxy the server trusts (X-Forwarded-Proto), or always with
    --cookie-secure; a proxy it does not trust cannot make them so, nor plain http.

    Method: sign in on the guarded server (which trusts 127.0.0.1, the default) as a proxy
    would forward an https request, then as plain http; then on a server started with
    --forwarded-allow-ips '' (trusting none) and on one with --cookie-secure.
    """
    url, token = guarded["url"], guarded["token"]
    forwarded = {"X-Forwarded-Proto": "https"}
    assert all("; secure" in c.lower() for c in _signed_in(url, token, forwarded))
    assert not any("secure" in c.lower() for c in _signed_in(url, token, {}))
    untrusting, _ = module_processes.server("--forwarded-allow-ips", "")
    assert not any("secure" in c.lower() for c in _signed_in(untrusting, token, forwarded))
    always, _ = module_processes.server("--cookie-secure")
    assert all("; secure" in c.lower() for c in _signed_in(always, token, {}))


def test_metrics_take_the_scrapers_secret(guarded: dict[str, str], module_processes: Any) -> None:
    """Goal: /metrics counts every tenant's work, so it needs the secret of
    --metrics-token-file (401 LF704 with WWW-Authenticate otherwise, an API token included);
    without that option it is closed and says how to open it; --metrics-open opens it.

    Method: scrape the guarded server without a credential, with a wrong secret, with an
    operator's API token and with the secret; then a server with neither option and one
    with --metrics-open.
    """
    url, token = guarded["url"], guarded["token"]
    for authorization in (None, "Bearer wrong-secret-0123456789", f"Bearer {token}"):
        headers = {"Authorization": authorization} if authorization else {}
        refused = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "LF704"
        assert refused.headers["www-authenticate"] == "Bearer"
    scraped = httpx.get(
        f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_SECRET}"}, timeout=10
    )
    assert scraped.status_code == 200
    assert "ledgerflow_unknown_outcomes_open" in scraped.text
    closed, _ = module_processes.server()
    shut = httpx.get(f"{closed}/metrics", timeout=10)
    assert shut.status_code == 401
    assert "--metrics-token-file" in shut.json()["detail"]
    assert "--metrics-open" in shut.json()["detail"]
    opened, _ = module_processes.server("--metrics-open")
    assert httpx.get(f"{opened}/metrics", timeout=10).status_code == 200


def test_serve_refuses_a_weak_or_contradictory_metrics_setting(tmp_path: Path) -> None:
    """Goal: a metrics secret too short to be one, or both --metrics-open and a secret, is a
    one-line usage error (LF104) before anything listens.
    Method: `ledgerflow serve` through click's runner."""
    weak = tmp_path / "weak"
    weak.write_text("short\n")
    strong = tmp_path / "strong"
    strong.write_text(METRICS_SECRET)
    db = ["serve", "--db", f"sqlite:///{tmp_path}/x.db", "--port", "0"]
    runner = CliRunner()
    for extra, needle in [
        (["--metrics-token-file", str(weak)], "at least 16"),
        (["--metrics-token-file", str(strong), "--metrics-open"], "choose one"),
    ]:
        refused = runner.invoke(cli, [*db, *extra])
        assert isinstance(refused.exception, CommandLineError), refused.output
        assert needle in str(refused.exception)
