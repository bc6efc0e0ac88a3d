"""The connections ``ledgerflow serve`` holds, bounded in time and in number (internal).

uvicorn's HTTP/1.1 protocol (h11) bounds only the idle time between two requests on a
connection. A client that connects and sends nothing, sends half a header line, or declares a
body and sends four bytes of it, holds its connection (a file descriptor, a buffer) for ever,
and a few hundred such clients leave the process no descriptor to accept anyone else.
:class:`BoundedProtocol` is that protocol with the bounds it lacks:

- **a request's head** (request line and headers) must be complete within
  ``header_read_seconds``, counted from the connection, or from the end of the previous answer
  on a kept-alive connection; a deadline, not an idle timer, so sending a byte a second does
  not extend it;
- **its body** must be complete within ``body_read_seconds``, counted from the end of its head,
  whether or not the app reads it;
- **at most** ``connections_max`` connections are open. When a new one would pass the bound,
  the one that has waited longest for its head (idle, or still sending it) is closed to make
  room: they cost nothing to drop and are exactly what a slow-client attack holds. Only when
  every connection is in the middle of a request is the new one refused (503).

Past its deadline a request is answered 408 (LF126), or, if nothing of it came yet, closed
without a word; then the connection is closed. The number of connections is bounded by what
the process's descriptor limit leaves (:func:`connection_bounds`), so that accepting never
runs out of descriptors: when it does, asyncio stops accepting for a whole second.
"""

from __future__ import annotations

import asyncio
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError, RequestError, RequestTimeoutError, ServerBusyError
from ledgerflow.web.problems import PROBLEM_MEDIA_TYPE, encode, problem_of


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionBounds:
    """How long a request's head and body may take to arrive, how many connections are held
    at once, and how many are accepted per wake-up of the event loop."""

    header_read_seconds: float
    body_read_seconds: float
    connections_max: int
    accepts_per_wake: int


def connection_bounds(
    *,
    header_read_seconds: float = limits.HTTP_HEADER_READ_SECONDS_DEFAULT,
    body_read_seconds: float = limits.HTTP_BODY_READ_SECONDS_DEFAULT,
    connections_max: int | None = None,
) -> ConnectionBounds:
    """The bounds for this process. Every connection and every connection being accepted is
    a descriptor, and ``limits.HTTP_DESCRIPTORS_RESERVED`` stay free for the journal and the
    rest: ``connections_max`` (default ``limits.HTTP_CONNECTIONS_MAX_DEFAULT``, lowered to
    fit) must fit in what the descriptor limit (``ulimit -n``) leaves. The soft limit is
    raised towards the hard one when that makes it fit."""
    wanted = connections_max or limits.HTTP_CONNECTIONS_MAX_DEFAULT
    accepts = max(4, min(limits.HTTP_ACCEPTS_PER_WAKE_MAX, wanted // 4))
    needed = wanted + accepts + limits.HTTP_DESCRIPTORS_RESERVED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):  # a system bound below the hard limit: keep soft
                pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        room = soft - limits.HTTP_DESCRIPTORS_RESERVED
        accepts = max(1, min(accepts, room // 4))
        fitting = room - accepts
        if connections_max is not None or fitting < 1:
            raise ConfigurationError(
                f"{wanted} connections need {needed} file descriptors and this process may "
                f"open {soft} (ulimit -n): raise the limit, or lower --connections-max to "
                f"{max(fitting, 0)} or less"
            )
        wanted = fitting
    return ConnectionBounds(
        header_read_seconds=header_read_seconds,
        body_read_seconds=body_read_seconds,
        connections_max=wanted,
        accepts_per_wake=accepts,
    )


def _raw_answer(error: RequestError, *, path: str = "", retry_after: bool = False) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written below h11 (which cannot
    answer a request whose head never arrived)."""
    status, problem = problem_of(error, instance=path)
    body = encode(problem)
    reason = {408: "Request Timeout", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {PROBLEM_MEDIA_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n"
        + ("Retry-After: 1\r\n" if retry_after else "")
        + "\r\n"
    )
    return head.encode("ascii") + body


class BoundedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the bounds of the module's docstring. A subclass made by
    :func:`protocol_class` carries its server's bounds and its queue of connections waiting
    for a head."""

    bounds: ClassVar[ConnectionBounds]
    # Connections waiting for a request head, the longest waiting first.
    waiting: ClassVar[OrderedDict[BoundedProtocol, None]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = ""  # "head", "body" or "" (the app answers; nothing to wait for)
        self._deadline: asyncio.TimerHandle | None = None
        self._head_started = False  # bytes of the awaited head have come

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if len(self.connections) > self.bounds.connections_max:
            if self.waiting:
                oldest = next(iter(self.waiting))
                oldest._close(answer=b"")
            else:
                self._close(answer=_raw_answer(_BUSY, retry_after=True))
                return
        self._review()

    def data_received(self, data: bytes) -> None:
        if self._phase == "head":
            self._head_started = True
        super().data_received(data)
        self._review()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._review()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter("")
        super().connection_lost(exc)

    def _review(self) -> None:
        """Arm the deadline of what the connection waits for now."""
        if self.transport.is_closing():
            self._enter("")
        elif self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete
        ):
            self._enter("head")
        elif self.conn.their_state is h11.SEND_BODY:
            self._enter("body")
        else:
            self._enter("")

    def _enter(self, phase: str) -> None:
        if phase == self._phase:
            return
        self._phase = phase
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.waiting.pop(self, None)
        if phase == "head":
            self._head_started = False
            self.waiting[self] = None
            self._deadline = self.loop.call_later(self.bounds.header_read_seconds, self._late)
        elif phase == "body":
            self._deadline = self.loop.call_later(self.bounds.body_read_seconds, self._late)

    def _late(self) -> None:
        self._deadline = None
        answering = self.cycle is not None and self.cycle.response_started
        silent = (self._phase == "head" and not self._head_started) or answering
        path = self.scope["path"] if self._phase == "body" else ""
        self._close(answer=b"" if silent else _raw_answer(_late_error(self._phase), path=path))

    def _close(self, *, answer: bytes) -> None:
        """Close now, after ``answer``; the app, if it is waiting for the body, is told the
        client has gone (and never gets half a body)."""
        self._enter("")
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if answer:
            self.transport.write(answer)
        self.transport.close()


def _late_error(phase: str) -> RequestTimeoutError:
    what = "head (request line and headers)" if phase == "head" else "body"
    return RequestTimeoutError(f"the request's {what} did not arrive in time; closing")


_BUSY = ServerBusyError(
    "the server holds every connection it may, each in the middle of a request; retry"
)


def protocol_class(bounds: ConnectionBounds) -> type[BoundedProtocol]:
    """The protocol of one server: these bounds, and its own queue of connections waiting."""
    return type("BoundedProtocol", (BoundedProtocol,), {"bounds": bounds, "waiting": OrderedDict()})
