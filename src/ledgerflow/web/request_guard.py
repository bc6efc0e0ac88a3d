"""What every request must be before a route sees it: addressed to this server, sent with
the credentials its route needs, bounded, and JSON a journal can hold (internal).

An ASGI middleware in front of the whole app (API and console alike). In this order, and
nothing reads the body before the first three have passed:

1. the path and query hold no NUL (422);
2. the ``Host`` header names a host this server answers for (421, :mod:`ledgerflow.web.hosts`),
   so a page that rebinds its name to this machine gets nothing;
3. the credentials: under ``/v1`` a valid bearer token (else 401), on a console page a live
   session (else the redirect to sign-in). They are checked in a worker thread (they are a
   journal read) and kept in the request's scope, so a route does not check them again. A
   request refused here is answered without its body being read or parsed;
4. the body is read up to its bound: ``limits.REQUEST_BODY_BYTES_MAX`` for an authenticated
   request, ``limits.ANONYMOUS_BODY_BYTES_MAX`` for one that needs no credentials (the
   console's sign-in form, the health checks); past it, 413 from ``Content-Length`` or as soon
   as the bytes received pass the bound, and nothing past the bound is buffered. A client that
   goes away mid-body is not answered and its partial body is never handed on;
5. a console body must be a form (``application/x-www-form-urlencoded``, 415 otherwise) of
   at most ``limits.FORM_FIELDS_MAX`` fields, split into its fields in a worker thread; an
   API body must be JSON (415) and is read by the one bounded reader
   (:mod:`ledgerflow.model.json_text`: depth and number of values bounded, measured in one
   linear pass) and refused (422) if it holds what no journal can keep or no caller means: a
   NUL, a lone surrogate, an integer outside 64 bits, ``NaN`` or an infinity. This runs in a
   worker thread: a two-megabyte body costs tens of milliseconds to read, and the event loop
   answers other requests meanwhile.

The body, once read, is handed on to the app unchanged (and kept in the scope under
``BODY_KEY`` for the idempotency hash, its JSON under ``JSON_KEY``), so the routes' own models
validate the same bytes (the console's routes take the form's fields as read here).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from starlette.concurrency import run_in_threadpool
from starlette.requests import cookie_parser

from ledgerflow import limits
from ledgerflow.errors import (
    HostNotAllowedError,
    LedgerflowError,
    NotAuthenticatedError,
    PayloadError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)
from ledgerflow.model import json_text, names
from ledgerflow.web.console_session import (
    CONSOLE_PATH,
    SESSION_COOKIE,
    SIGN_IN_PATH,
    STATIC_PATH,
    SignInRequiredError,
    sign_in_redirect,
)
from ledgerflow.web.declare import (
    BODY_KEY,
    FORM_KEY,
    JSON_KEY,
    PRINCIPAL_KEY,
    SESSION_KEY,
    Server,
)
from ledgerflow.web.hosts import AllowedHosts
from ledgerflow.web.problems import PROBLEM_MEDIA_TYPE, encode, problem_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

API_PREFIX = "/v1/"


def _constant(name: str) -> Any:
    raise PayloadError(f"{name} is not JSON: numbers in the body must be finite")


def _check_text(text: str, where: str) -> None:
    # The one text rule of every face (the console's forms apply it too).
    names.check_storable(text, where=where)


def _check_number(value: int | float) -> None:
    if isinstance(value, float):
        if math.isinf(value):
            raise PayloadError("a number in the body is too large to be a finite number")
    elif not -limits.REQUEST_INTEGER_MAX - 1 <= value <= limits.REQUEST_INTEGER_MAX:
        raise PayloadError(
            f"an integer in the body is outside 64 bits (at most {limits.REQUEST_INTEGER_MAX})"
        )


def checked_json(raw: bytes) -> Any:
    """The body as JSON a journal can hold, or :class:`PayloadError` saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("the body is not UTF-8 text") from None
    value = json_text.loads(text, what="the body", parse_constant=_constant)
    # Every value, without recursion (the depth is bounded, the breadth by JSON_VALUES_MAX).
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str:
            _check_text(item, "a string in the body")
        elif kind is int or kind is float:
            _check_number(item)
        elif kind is list:
            pending.extend(item)
        elif kind is dict:
            for key in item:
                _check_text(key, "a key in the body")
            pending.extend(item.values())
    return value


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class _ClientGoneError(Exception):
    """The client closed the connection before its body had arrived: nobody to answer."""


class RequestGuard:
    """The middleware: see the module's docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        server: Server,
        allowed_hosts: AllowedHosts,
        body_bytes_max: int = limits.REQUEST_BODY_BYTES_MAX,
    ):
        self.app = app
        self.server = server
        self.allowed_hosts = allowed_hosts
        self.body_bytes_max = body_bytes_max

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        unread = True
        try:
            self._addressed(scope, headers)
            bound = await self._identified(scope, headers)
            body = await self._read(headers, receive, bound)
            unread = False
            if body and scope["path"].startswith(API_PREFIX):
                scope[JSON_KEY] = await _api_json(headers, body)
            elif body and _is_console(scope["path"]):
                scope[FORM_KEY] = await _console_form(headers, body)
        except SignInRequiredError:
            redirect = sign_in_redirect()
            if unread and self._not_drained(headers):
                redirect.headers["Connection"] = "close"
            await redirect(scope, _nothing, send)
            return
        except _ClientGoneError:
            return
        except LedgerflowError as error:
            status, problem = problem_of(error, instance=scope.get("path", ""))
            await _answer(send, status, problem, closing=unread and self._not_drained(headers))
            return
        scope[BODY_KEY] = body
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _not_drained(self, headers: dict[str, str]) -> bool:
        """Whether the body of a request answered before it was read is left unread and the
        connection closed: a body declared past the bound, or of no declared length. A
        smaller one is read and dropped by the server after the answer (within its body
        deadline), so that the client reads the answer rather than a reset connection."""
        declared = headers.get("content-length", "")
        if declared.isdigit():
            return int(declared) > self.body_bytes_max
        return "transfer-encoding" in headers

    def _addressed(self, scope: Scope, headers: dict[str, str]) -> None:
        path: str = scope.get("path", "")
        if "\x00" in path or b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            raise PayloadError("the path or query holds a NUL character")
        host = headers.get("host")
        if not self.allowed_hosts.allows(host):
            raise HostNotAllowedError(
                f"this server does not answer for the host {host!r}; it answers "
                f"{self.allowed_hosts.describe()} (ledgerflow serve --allowed-host)"
            )

    async def _identified(self, scope: Scope, headers: dict[str, str]) -> int:
        """Check the credentials the route needs and keep them in the scope; the bound of
        the body this request may send. Without valid credentials: 401 under ``/v1``,
        :class:`SignInRequiredError` on a console page."""
        path: str = scope["path"]
        scope[PRINCIPAL_KEY] = scope[SESSION_KEY] = None
        if self.server.insecure:
            return self.body_bytes_max
        tokens = self.server.operations.tokens()
        if path.startswith(API_PREFIX):
            token = _bearer(headers.get("authorization", ""))
            scope[PRINCIPAL_KEY] = await run_in_threadpool(tokens.authenticate, token)
            return self.body_bytes_max
        if _is_console_page(path):
            cookie = cookie_parser(headers.get("cookie", "")).get(SESSION_COOKIE)
            try:
                scope[SESSION_KEY] = await run_in_threadpool(tokens.session, cookie)
            except NotAuthenticatedError:
                raise SignInRequiredError from None
            return self.body_bytes_max
        return min(self.body_bytes_max, limits.ANONYMOUS_BODY_BYTES_MAX)

    async def _read(self, headers: dict[str, str], receive: Receive, bound: int) -> bytes:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > bound:
            raise PayloadTooLargeError(
                f"the body is {declared} bytes; at most {bound} are read{_anonymous(bound)}"
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGoneError
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > bound:
                raise PayloadTooLargeError(
                    f"the body is larger than {bound} bytes{_anonymous(bound)}; the rest was "
                    "not read"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


async def _api_json(headers: dict[str, str], body: bytes) -> Any:
    """An API body read as checked JSON, in a worker thread (see the module's docstring)."""
    if not _is_json(headers.get("content-type", "")):
        raise UnsupportedMediaTypeError(
            "the API reads application/json bodies; send Content-Type: application/json"
        )
    return await run_in_threadpool(checked_json, body)


def form_fields(raw: bytes) -> list[tuple[str, str]]:
    """A console form's body (``application/x-www-form-urlencoded``) as its fields, decoded as
    Starlette decodes them, or :class:`PayloadError` past ``limits.FORM_FIELDS_MAX`` fields
    (counted before anything is parsed)."""
    try:
        return parse_qsl(
            raw.decode("latin-1"), keep_blank_values=True, max_num_fields=limits.FORM_FIELDS_MAX
        )
    except ValueError:
        raise PayloadError(
            f"the form has more than {limits.FORM_FIELDS_MAX} fields; the console's have a dozen"
        ) from None


async def _console_form(headers: dict[str, str], body: bytes) -> list[tuple[str, str]]:
    """A console form's fields, read in a worker thread: Starlette's own parser runs on the
    event loop, and two megabytes of ``&`` kept it there for most of a second."""
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise UnsupportedMediaTypeError(
            "the console reads its own forms: application/x-www-form-urlencoded"
        )
    return await run_in_threadpool(form_fields, body)


def _anonymous(bound: int) -> str:
    return " without credentials" if bound == limits.ANONYMOUS_BODY_BYTES_MAX else ""


def _bearer(authorization: str) -> str | None:
    scheme, _, credentials = authorization.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def _is_console(path: str) -> bool:
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


def _is_console_page(path: str) -> bool:
    """A console path that needs a session: all but the sign-in form and the stylesheet."""
    return _is_console(path) and path != SIGN_IN_PATH and not path.startswith(STATIC_PATH + "/")


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


async def _answer(send: Send, status: int, problem: dict[str, Any], *, closing: bool) -> None:
    """A problem document; ``closing``: the connection is closed after it (a body the client
    declared was not read, and is not drained)."""
    body = encode(problem)
    headers = [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if closing:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
