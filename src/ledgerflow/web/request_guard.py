"""What every request must be before a route sees it: bounded, and JSON a journal can hold
(internal).

An ASGI middleware in front of the whole app (API and console alike):

- a body larger than ``limits.REQUEST_BODY_BYTES_MAX`` is refused with 413 as soon as its
  ``Content-Length`` says so, or as soon as the bytes received pass the bound; nothing past
  the bound is ever buffered, so a 50 MB body costs at most the bound in memory;
- an API request with a body that is not JSON is 415;
- an API body is read as JSON by the one bounded reader (:mod:`ledgerflow.model.json_text`:
  nesting at most ``limits.JSON_DEPTH_MAX``, measured without recursion) and refused (422) if
  it holds what no journal can keep or no caller means: a NUL character, a lone surrogate,
  an integer outside 64 bits, ``NaN`` or an infinity; the same for a NUL in the path or query.

The body, once read, is handed on to the app unchanged (and kept in the request's scope under
:data:`BODY_KEY` for the idempotency hash), so the routes' own models validate the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote_to_bytes

from ledgerflow import limits
from ledgerflow.errors import (
    LedgerflowError,
    PayloadError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)
from ledgerflow.model import json_text, names
from ledgerflow.web.problems import PROBLEM_MEDIA_TYPE, encode, problem_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_KEY = "ledgerflow.body"
API_PREFIX = "/v1/"
_INTEGER_DIGITS_MAX = 20


def _integer(text: str) -> int:
    # Refused before int() parses it: a 100,000-digit integer must not cost a bignum parse.
    if len(text.lstrip("-")) > _INTEGER_DIGITS_MAX or not (
        -limits.REQUEST_INTEGER_MAX - 1 <= (value := int(text)) <= limits.REQUEST_INTEGER_MAX
    ):
        raise PayloadError(
            f"an integer in the body is outside 64 bits (at most {limits.REQUEST_INTEGER_MAX})"
        )
    return value


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise PayloadError("a number in the body is too large to be a finite number")
    return value


def _constant(name: str) -> Any:
    raise PayloadError(f"{name} is not JSON: numbers in the body must be finite")


def _check_text(text: str, where: str) -> None:
    # The one text rule of every face (the console's forms apply it too).
    names.check_storable(text, where=where)


def checked_json(raw: bytes) -> Any:
    """The body as JSON a journal can hold, or :class:`PayloadError` saying why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("the body is not UTF-8 text") from None
    json_text.loads(text, what="the body")  # the nesting bound, before any recursive parse
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except ValueError as exc:
        raise PayloadError(f"the body is not valid JSON: {exc}") from None
    # Every string and key, without recursion (the depth is bounded, the breadth is not).
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            _check_text(item, "a string in the body")
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                _check_text(key, "a key in the body")
                pending.append(inner)
    return value


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class RequestGuard:
    """The middleware: see the module's docstring."""

    def __init__(self, app: ASGIApp, *, body_bytes_max: int = limits.REQUEST_BODY_BYTES_MAX):
        self.app = app
        self.body_bytes_max = body_bytes_max

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await self._checked(scope, receive)
        except LedgerflowError as error:
            status, problem = problem_of(error, instance=scope.get("path", ""))
            await _answer(send, status, problem)
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

    async def _checked(self, scope: Scope, receive: Receive) -> bytes:
        path: str = scope.get("path", "")
        if "\x00" in path or b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            raise PayloadError("the path or query holds a NUL character")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.body_bytes_max:
            raise PayloadTooLargeError(
                f"the body is {declared} bytes; at most {self.body_bytes_max} are read"
            )
        body = await self._read(receive)
        if body and path.startswith(API_PREFIX):
            if not _is_json(headers.get("content-type", "")):
                raise UnsupportedMediaTypeError(
                    "the API reads application/json bodies; send Content-Type: application/json"
                )
            checked_json(body)
        return body

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.body_bytes_max:
                raise PayloadTooLargeError(
                    f"the body is larger than {self.body_bytes_max} bytes; the rest was not read"
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


async def _answer(send: Send, status: int, problem: dict[str, Any]) -> None:
    body = encode(problem)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
