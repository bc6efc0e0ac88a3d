"""Probing a real ``ledgerflow serve`` from outside: /healthz polled while a test attacks it,
raw sockets that send what no well-behaved client would, and tokens made on its journal.

Timings are measured here with a monotonic clock; the tests assert only the generous bounds
the issue names (an answer within 1 s, /healthz within 100 ms) and print the figures.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

import httpx

from ledgerflow.operators.service import Operations

WAIT_SECONDS_MAX = 30.0


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None, url
    assert parts.port is not None, url
    return parts.hostname, parts.port


def make_token(db_url: str, *, name: str, role: str, tenant: str = "acme") -> str:
    with Operations(db_url, migrate=True) as operations:
        text, _ = operations.tokens().create(name=name, role=role, tenant=tenant, created_by="test")
    return text


def console_session(url: str, token: str) -> str:
    """Sign in to the console with ``token``: the ``Cookie`` header of the session."""
    with httpx.Client(base_url=url, timeout=WAIT_SECONDS_MAX) as client:
        form = client.get("/console/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        done = client.post(
            "/console/sign-in", data={"token": token, "csrf": csrf.group(1)}, follow_redirects=False
        )
        assert done.status_code == 303, done.text
        return f"lf_session={done.cookies['lf_session']}"


@dataclass
class HealthProbe:
    """``/healthz`` asked again and again from a thread (a new request as soon as the last
    one is answered) while the block runs; each answer's latency is kept."""

    url: str
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HealthProbe:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        # The block starts once the probe's client is made and connected: what it measures
        # from then on is the server, not this process setting its client up.
        assert self._ready.wait(WAIT_SECONDS_MAX), "the probe never got its first answer"
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=WAIT_SECONDS_MAX)

    def _poll(self) -> None:
        with httpx.Client(timeout=WAIT_SECONDS_MAX) as client:
            client.get(f"{self.url}/healthz")
            self._ready.set()
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    answer = client.get(f"{self.url}/healthz")
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                self.latencies.append(time.monotonic() - started)
                if answer.status_code != 200:
                    self.failures.append(f"{answer.status_code} {answer.text[:200]}")
                # Pace the polls a little, so the probe is not itself the load.
                self._stop.wait(0.005)

    @property
    def worst(self) -> float:
        return max(self.latencies, default=0.0)


def is_closed(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (read end: EOF or reset), without waiting."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True
    if data:  # an answer came (a 408, say): closed once the bytes after it are EOF
        sock.recv(len(data))
        return is_closed(sock)
    return True


def until_closed(sock: socket.socket, *, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends on ``sock`` until it closes it, and how long that took
    from now; raises ``TimeoutError`` if it is still open after ``timeout``."""
    started = time.monotonic()
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received, time.monotonic() - started


def fresh_healthz(url: str) -> tuple[bytes, float]:
    """``GET /healthz`` on a new connection, by hand (no client library's set-up in the
    time): the answer's first bytes and the seconds from connecting to the whole answer."""
    started = time.monotonic()
    with connected(
        url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    ) as sock:
        received, _ = until_closed(sock, timeout=5)
    return received, time.monotonic() - started


def connected(url: str, first_bytes: bytes = b"") -> socket.socket:
    """A raw TCP connection to the server, which has sent ``first_bytes``."""
    sock = socket.create_connection(address(url), timeout=WAIT_SECONDS_MAX)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock
