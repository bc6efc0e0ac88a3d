"""The HTTP API as the command line calls it when it acts with an API token (internal).

Given ``--token`` (or ``LEDGERFLOW_TOKEN``), ``start``, ``signal``, ``cancel``, ``repair ...``
and ``versions retire`` do not open a journal: they send their request to the server at
``--url`` (or ``LEDGERFLOW_URL``), so the token's principal acts, with its role and tenant,
exactly as any client of the API does, and the audit log names it. An answer that is a problem
document is raised as the Ledgerflow error of its code, with the server's text and ids (the
command prints it as it prints its own errors); a server that cannot be reached, or that
answers something that is not Ledgerflow's API, is
:class:`~ledgerflow.errors.ApiUnreachableError`. The token goes only into the
``Authorization`` header: it is never printed, and no error names it.

Example::

    with ApiClient("http://127.0.0.1:8080", token) as api:
        status, body = api.call("POST", f"/v1/instances/{iid}/cancel", {"reason": "duplicate"})
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from ledgerflow import errors, limits
from ledgerflow.errors import ApiUnreachableError, LedgerflowError
from ledgerflow.redaction import redact

__all__ = ["ApiClient", "error_of", "quoted"]

# Extension members a problem renames so as not to shadow RFC 9457's (web/problems.py).
_RENAMED = {"instance_status": "status", "error_type": "type", "error_title": "title"}


def quoted(segment: str) -> str:
    """One path segment of a route, escaped (an instance id or a signal name as given)."""
    return quote(segment, safe="")


def _error_classes() -> Iterator[type[LedgerflowError]]:
    pending: list[type[LedgerflowError]] = [LedgerflowError]
    while pending:
        kind = pending.pop()
        yield kind
        pending.extend(kind.__subclasses__())


def error_of(problem: dict[str, Any]) -> LedgerflowError:
    """The error a problem document stands for: its code's class, its detail, its ids."""
    code = str(problem.get("code", errors.LedgerflowError.code))
    kind = next((k for k in _error_classes() if k.code == code), LedgerflowError)
    error = kind(str(problem.get("detail") or problem.get("title") or "the server refused"))
    for member, value in problem.items():
        name = _RENAMED.get(member, member)
        if name in kind.ID_NAMES:
            setattr(error, name, value)
    return error


class ApiClient:
    """Requests to one server's API under one token, each bounded in time."""

    def __init__(
        self, url: str, token: str, *, timeout: float = limits.CLI_API_TIMEOUT_SECONDS
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """The status and JSON document of one request (any status, problems included)."""
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ApiUnreachableError(
                f"no answer from the API at {redact(self.url)}: {type(exc).__name__}: "
                f"{redact(str(exc)) or 'the connection failed'}; if the request was sent, it "
                "may have been carried out (ledgerflow show / audit says)",
                url=redact(self.url),
            ) from None
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise ApiUnreachableError(
                f"the server at {redact(self.url)} answered {method} {path} with "
                f"{response.status_code} and no JSON document: is it `ledgerflow serve`?",
                url=redact(self.url),
            )
        return response.status_code, document

    def send(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """The JSON answer of a request that succeeded; a problem is raised as its error."""
        status, document = self.call(method, path, body)
        if status >= 400:
            raise error_of(document)
        return document
