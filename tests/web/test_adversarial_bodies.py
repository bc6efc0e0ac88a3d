"""Issue 22, item 1: a body crafted to be slow to read must not freeze ``ledgerflow serve``.

On the old code the body was checked for JSON nesting before the token, on the event loop,
by an expression that backtracks: 24 KB of ``"`` then ``\\"`` took 2-3 s to be refused (422,
not 401) while /healthz waited as long, and 2 MB would have held the process for hours.
Now credentials come first (no body is parsed for a request without them), the nesting and
the number of values are measured in one linear pass, and the JSON is read in a worker
thread. Against a real server process: each shape at the 2 MB bound, with no token (401)
and with a valid one (answered, whatever the answer), each within 1 s, while /healthz is
asked continuously and answers within 100 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from serve_probes import HealthProbe, console_session, make_token

from ledgerflow import limits

pytestmark = pytest.mark.slow

# Just under the body bound: every byte of it is read.
SIZE = limits.REQUEST_BODY_BYTES_MAX - 64
START = b'{"workflow": "pay", "key": "k-1", "input": '


def _filled(head: bytes, unit: bytes, tail: bytes) -> bytes:
    return head + unit * ((SIZE - len(head) - len(tail)) // len(unit)) + tail


SHAPES: dict[str, Callable[[], bytes]] = {
    # The issue's own: an unterminated string of escaped quotes.
    "quotes": lambda: _filled(b'"', b'\\"', b""),
    "quotes-in-input": lambda: _filled(START + b'"', b'\\"', b'"}'),
    "backslashes": lambda: _filled(b'"', b"\\", b""),
    "quote-runs": lambda: _filled(b"", b'"a', b""),
    "open-brackets": lambda: _filled(b"", b"[", b""),
    "flat-brackets": lambda: _filled(START + b"[", b"[],", b"[]]}"),
    "objects": lambda: _filled(START + b"[", b'{"a": 1},', b"{}]}"),
    "long-string": lambda: _filled(START + b'"', b"a", b'"}'),
    "strings": lambda: _filled(START + b"[", b'"",', b'""]}'),
    "numbers": lambda: _filled(START + b"[", b"1,", b"1]}"),
    "long-number": lambda: _filled(START, b"9", b"}"),
    "unicode-escapes": lambda: _filled(START + b'"', b"\\u00e9", b'"}'),
}


@pytest.fixture(scope="module")
def server(module_processes: Any) -> tuple[str, str]:
    """A server over a journal with an operator's token; its URL and the token."""
    token = make_token(module_processes.db_url, name="sam", role="operator")
    url, _ = module_processes.server()
    # The first requests of a process pay for what it loads lazily; the figures are of the
    # server as it runs afterwards.
    for credentials in (None, token):
        _post(url, START + b"1}", credentials)
        _post(url, SHAPES["long-string"](), credentials)
    return url, token


def _post(url: str, body: bytes, token: str | None) -> tuple[httpx.Response, float]:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    started = time.monotonic()
    # A timeout well past the bound: the old code answers in hours, and fails here.
    answer = httpx.post(f"{url}/v1/instances", content=body, headers=headers, timeout=10)
    return answer, time.monotonic() - started


# This machine's scheduler alone delays an idle server's /healthz past 100 ms now and then
# (a 162 ms outlier in 0.5 s of polling, measured at load 5 on 2 cores). An exchange whose
# worst /healthz passes the bound is run again, up to this many times in all: the old code
# blocks the event loop for the whole parse every time (hours for the first shape), so it
# fails each attempt, while noise does not repeat.
ATTEMPTS = 3


def _exchange(url: str, body: bytes, token: str) -> float:
    """Both requests with /healthz polled meanwhile; each answer checked; the worst
    /healthz latency."""
    with HealthProbe(url) as probe:
        anonymous, anonymous_seconds = _post(url, body, None)
        signed, signed_seconds = _post(url, body, token)
    print(
        f"\n{len(body)} bytes; no token {anonymous.status_code} in "
        f"{anonymous_seconds * 1000:.0f} ms; token {signed.status_code} in "
        f"{signed_seconds * 1000:.0f} ms; /healthz worst {probe.worst * 1000:.0f} ms over "
        f"{len(probe.latencies)} polls",
        end="",
    )
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["code"] == "LF704"
    assert signed.status_code < 500, signed.text
    assert signed.status_code != 401, signed.text
    assert anonymous_seconds < 1.0
    assert signed_seconds < 1.0
    assert not probe.failures, probe.failures
    assert probe.latencies
    return probe.worst


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_adversarial_body_is_answered_within_a_second(
    server: tuple[str, str], shape: str
) -> None:
    """Goal: a 2 MB body of any slow-to-read shape is answered within 1 s, without a token
    (401, nothing parsed) and with one (any 4xx or success: the server read it), and the
    server answers /healthz within 100 ms meanwhile.

    Method: the body is built before the clock starts; /healthz is polled from a thread for
    the whole exchange; both answers' times and the worst /healthz are printed. Each
    exchange must answer within 1 s; the /healthz bound must hold in one of ATTEMPTS.
    """
    url, token = server
    body = SHAPES[shape]()
    assert len(body) <= limits.REQUEST_BODY_BYTES_MAX
    print(f"\n{shape}:", end="")
    worst = [_exchange(url, body, token)]
    while worst[-1] >= 0.1 and len(worst) < ATTEMPTS:
        worst.append(_exchange(url, body, token))
    assert worst[-1] < 0.1, worst


FORM = "application/x-www-form-urlencoded"


def test_a_console_form_is_read_off_the_event_loop(server: tuple[str, str]) -> None:
    """Goal: a console form is split into its fields off the event loop and with its fields
    bounded: 2 MB of ``&`` from a signed-in operator (the old code parsed them on the loop,
    for most of a second, /healthz waiting as long) is refused within 1 s, /healthz within
    100 ms meanwhile; without a session the same body is redirected to sign-in unread; a
    body that is not a form is 415.

    Method: sign in with the operator's token, then POST to a repair plan form (the
    /healthz bound must hold in one of ATTEMPTS, as above).
    """
    url, token = server
    cookie = console_session(url, token)
    body = _filled(b"csrf=x&kind=resume&reason=r", b"&", b"")
    path = f"{url}/console/instances/wf_x/repairs/plan"
    worst: list[float] = []
    while not worst or (worst[-1] >= 0.1 and len(worst) < ATTEMPTS):
        with HealthProbe(url) as probe:
            started = time.monotonic()
            signed = httpx.post(
                path, content=body, headers={"content-type": FORM, "cookie": cookie}, timeout=10
            )
            seconds = time.monotonic() - started
            anonymous = httpx.post(path, content=body, headers={"content-type": FORM}, timeout=10)
        print(
            f"\n2 MB of '&' to a console form: {signed.status_code} in {seconds * 1000:.0f} "
            f"ms; /healthz worst {probe.worst * 1000:.0f} ms over {len(probe.latencies)} polls"
        )
        assert signed.status_code == 422, signed.text
        assert "fields" in signed.text
        assert seconds < 1.0
        assert not probe.failures, probe.failures
        worst.append(probe.worst)
    assert worst[-1] < 0.1, worst
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == "/console/sign-in"
    other = httpx.post(
        path, content=b'{"kind": "resume"}', timeout=10,
        headers={"content-type": "application/json", "cookie": cookie},
    )  # fmt: skip
    assert other.status_code == 415, other.text
