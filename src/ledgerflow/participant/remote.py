"""A participant reached over HTTP: the engine-side adapter for a participant service.

This module owns the wire protocol between the engine and a remote participant, and above all
the mapping of what comes back onto the effect protocol. Only a well-formed ``200`` with a
receipt is evidence (CONFIRMED); only an explicit rejection body proves nothing was applied
(:class:`~ledgerflow.errors.EffectRejectedError`). Everything else, from a timeout to a ``500``
to a ``200`` that does not speak the protocol, raises, so the engine records UNKNOWN: a response
that proves neither way must never be read as either.

Protocol, for a participant ``name`` at ``base_url``:

- ``POST {base_url}/{name}/apply`` with ``{"key", "operation", "payload", "effect_id",
  "instance_id", "attempt"}`` and the key again as an ``Idempotency-Key`` header (the IETF
  httpapi draft's convention: a quoted structured-field string; left out for a key that is not
  printable ASCII, which a header cannot carry: the body's key is the one that counts);
  ``200 {"status": "applied", "receipt": {...}}`` or
  ``409``/``422 {"status": "rejected", "error_code": str, "retryable": bool}``.
- ``GET {base_url}/{name}/lookup/{key}?attempt=N&sent_at=T`` (key percent-encoded; ``T``
  when the key was first sent, seconds since the epoch on the engine's clock, so a participant
  whose record is complete only since some moment can tell "not applied" from "forgotten")
  answering ``{"verdict": "applied", "evidence": ...}``, ``{"verdict": "not-applied"}`` (which
  fences attempts 1..N of the key at the participant) or ``{"verdict": "unknown", "reason":
  str (optional)}`` (the engine asks again, then hands the effect to a person with the reason).
- An answer must name the request it answers: the applied answer or its receipt carries
  ``"key"`` equal to the request's key or ``"effect_id"`` equal to its effect id, and a lookup's
  ``"applied"`` answer or its evidence carries the key asked about. A ``200`` naming another
  key or effect id, or none, is an answer to some other request (a proxy mixing up
  connections, a cache keyed wrongly): never evidence for this one, so UNKNOWN (a lookup answer
  of that kind is no answer). An applied answer may add ``"key_retention_seconds"``, how long
  the service remembers a key (``ledgerflow check-participant`` holds it to the engine's retry
  horizon).
- A compensation is applied like any effect, under its own key, with ``"original_key"`` added.
  Its precondition is ``GET {base_url}/{name}/precondition/{key}?original={original key}``
  answering ``{"verdict": "holds"}``, ``{"verdict": "satisfied", "evidence": ...}`` or
  ``{"verdict": "violated", "reason": str}``; anything else raises, because a precondition
  misread as "satisfied" would count an effect as undone that is still applied.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from ledgerflow.errors import EffectRejectedError, RegistrationError
from ledgerflow.model import arguments
from ledgerflow.model.classification import Classification
from ledgerflow.model.compensation import Precondition, PreconditionVerdict
from ledgerflow.model.definition import EffectCall, Participant
from ledgerflow.model.effect import LookupAnswer, LookupVerdict
from ledgerflow.model.ids import IdempotencyKey
from ledgerflow.model.retry import DEFAULT_EFFECT_RETRY, DEFAULT_LOOKUP_RETRY, RetryPolicy
from ledgerflow.participant.declaring import (
    check_operations,
    described,
    per_operation,
    request_text,
)
from ledgerflow.redaction import redact

# The W3C trace-context propagator's module: loaded only when the process traces (the otel
# extra: an engine made with tracing, or the application's own OpenTelemetry).
_TRACECONTEXT = "opentelemetry.trace.propagation.tracecontext"


IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"


def idempotency_key_header(key: str) -> dict[str, str]:
    """The ``Idempotency-Key`` header carrying ``key`` as a structured-field string (RFC 8941
    3.3.3: printable ASCII, ``"`` and ``\\`` escaped); none when ``key`` cannot be one."""
    if not all(" " <= char <= "~" for char in key):
        return {}
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return {IDEMPOTENCY_KEY_HEADER: f'"{escaped}"'}


def read_idempotency_key_header(value: str) -> str:
    """The key an ``Idempotency-Key`` header carries: a structured-field string, or (as some
    clients send it) the bare key; ``ValueError`` for a malformed quoted string."""
    text = value.strip(" ")
    if not text.startswith('"'):
        return text
    key: list[str] = []
    escaped = False
    for index, char in enumerate(text[1:], start=1):
        if escaped:
            if char not in '"\\':
                raise ValueError(f"{IDEMPOTENCY_KEY_HEADER}: '\\{char}' is not an escape")
            key.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            if index != len(text) - 1:
                raise ValueError(f"{IDEMPOTENCY_KEY_HEADER}: text after the closing quote")
            return "".join(key)
        else:
            key.append(char)
    raise ValueError(f"{IDEMPOTENCY_KEY_HEADER}: the quoted string is not closed")


def trace_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span, the effect's dispatch, so the
    participant's own spans join the workflow's trace; nothing when the process does not trace.
    It never imports OpenTelemetry itself."""
    tracecontext = sys.modules.get(_TRACECONTEXT)
    if tracecontext is None:
        return {}
    carrier: dict[str, str] = {}
    tracecontext.TraceContextTextMapPropagator().inject(carrier)
    return carrier


# Statuses on which a body saying "rejected" is believed. Any other status carrying that body is
# not this protocol, and a mis-read rejection would let the engine re-dispatch an applied effect.
_REJECTION_STATUSES = frozenset({409, 422})


def names_another(
    answer: Mapping[str, Any], receipt: Any, *, key: str, effect_id: str | None
) -> str:
    """Why an applied answer (and its receipt) is not about the request of ``key`` and
    ``effect_id``, or "" when it names that request (see the protocol above)."""
    named: dict[str, Any] = {}
    for where in (receipt, answer):
        if isinstance(where, Mapping):
            for field in ("key", "effect_id"):
                if named.get(field) is None:
                    named[field] = where.get(field)
    if named.get("key") is None and named.get("effect_id") is None:
        return "it names neither the key nor the effect id"
    if named.get("key") is not None and named["key"] != key:
        return f"it names key {str(named['key'])[:200]!r}"
    if effect_id is not None and named.get("effect_id") not in (None, effect_id):
        return f"it names effect id {str(named['effect_id'])[:200]!r}"
    return ""


class RemoteOutcomeUnknown(Exception):  # noqa: N818 - named for the effect state it produces.
    """The participant service answered, but without proof either way: the outcome is UNKNOWN."""

    def __init__(
        self, message: str, *, participant: str, operation: str, key: str, status: int | None
    ) -> None:
        super().__init__(message)
        self.participant = participant
        self.operation = operation
        self.key = key
        self.status = status


class RemoteLookupError(Exception):
    """The participant's lookup did not give a readable verdict."""

    def __init__(self, message: str, *, participant: str, key: str, status: int | None) -> None:
        super().__init__(message)
        self.participant = participant
        self.key = key
        self.status = status


class RemotePreconditionError(RemoteLookupError):
    """The participant's precondition check did not give a readable verdict."""


_AskError = TypeVar("_AskError", bound=RemoteLookupError)


@dataclass(slots=True)
class _LoopClient:
    client: httpx.AsyncClient
    # Keeps alive the generator that closes the client when the loop shuts down.
    closer: AsyncGenerator[None, None]


async def _close_when_loop_shuts_down(
    client: httpx.AsyncClient,
) -> AsyncGenerator[None, None]:
    # The loop finalizes every started async generator in shutdown_asyncgens() (asyncio.run does
    # this), so this is how the client's sockets get closed without the engine knowing about
    # remote participants; an unclosed pool would otherwise leak and warn at garbage collection.
    try:
        yield
    finally:
        await client.aclose()


class RemoteParticipant(Participant):
    """A :class:`Participant` whose effects and lookup are HTTP calls to a participant service.

    Built by :func:`remote_participant`. One ``httpx.AsyncClient`` is shared by all its effects
    within an event loop (a client is bound to the loop it was first used on), and is closed when
    that loop shuts down or by :meth:`aclose`.
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        deduplicates: bool,
        timeout_seconds: float,
        lookup_retry: RetryPolicy = DEFAULT_LOOKUP_RETRY,
        key_retention: timedelta | None = None,
    ) -> None:
        super().__init__(
            name,
            deduplicates=deduplicates,
            lookup_retry=lookup_retry,
            key_retention=key_retention,
        )
        self.base_url = base_url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return (
            f"RemoteParticipant({self.name!r}, {redact(self.base_url)!r}, "
            f"deduplicates={self.deduplicates})"
        )

    async def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None or entry.client.is_closed:
            client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_seconds))
            closer = _close_when_loop_shuts_down(client)
            # Starting the generator is what registers it with the loop for finalization.
            await anext(closer)
            entry = _LoopClient(client=client, closer=closer)
            self._clients[loop] = entry
        return entry.client

    async def aclose(self) -> None:
        """Close the client of the running loop (optional: loop shutdown closes it too)."""
        entry = self._clients.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry.closer.aclose()

    async def apply(self, operation: str, call: EffectCall) -> Any:
        """Send one dispatch; return the receipt, raise a rejection, or raise for UNKNOWN."""
        body = request_text(self.name, operation, call)
        client = await self._client()
        response = await client.post(
            f"{self.base_url}/{self.name}/apply",
            content=body,
            headers={
                "content-type": "application/json",
                **idempotency_key_header(call.idempotency_key),
                **trace_headers(),
            },
        )
        return self._read_apply(operation, call.idempotency_key, call.effect_id, response)

    def _read_apply(
        self, operation: str, key: str, effect_id: str, response: httpx.Response
    ) -> Any:
        def unknown(why: str) -> RemoteOutcomeUnknown:
            return RemoteOutcomeUnknown(
                f"{self.name}.{operation} key {key!r}: {why}",
                participant=self.name,
                operation=operation,
                key=key,
                status=response.status_code,
            )

        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise unknown(f"HTTP {response.status_code} without a JSON object body")
        if response.status_code == 200:
            receipt = answer.get("receipt")
            if answer.get("status") != "applied" or receipt is None:
                raise unknown("HTTP 200 without an applied status and a receipt")
            stranger = names_another(answer, receipt, key=key, effect_id=effect_id)
            if stranger:
                raise unknown(f"HTTP 200 whose receipt answers another request: {stranger}")
            return receipt
        if response.status_code in _REJECTION_STATUSES and answer.get("status") == "rejected":
            error_code = answer.get("error_code")
            retryable = answer.get("retryable", True)
            if not isinstance(error_code, str) or not isinstance(retryable, bool):
                raise unknown("malformed rejection (error_code or retryable)")
            message = answer.get("message")
            raise EffectRejectedError(
                message
                if isinstance(message, str)
                else f"{self.name}.{operation} rejected: {error_code}",
                error_code=error_code,
                retryable=retryable,
            )
        raise unknown(f"HTTP {response.status_code} proves neither applied nor not applied")

    async def _verdict(
        self, what: str, path: str, *, key: str, params: Mapping[str, Any], error: type[_AskError]
    ) -> tuple[Any, dict[str, Any], Callable[[str], _AskError]]:
        """GET a question about ``key``: the verdict, the whole answer, and how to refuse it.

        Only a ``200`` with a JSON object is read; anything else raises ``error``.
        """
        client = await self._client()
        response = await client.get(
            f"{self.base_url}/{self.name}/{path}/{quote(key, safe='')}",
            params=params,
            headers=trace_headers(),
        )

        def failed(why: str) -> _AskError:
            return error(
                f"{what} key {key!r}: {why}",
                participant=self.name,
                key=key,
                status=response.status_code,
            )

        if response.status_code != 200:
            raise failed(f"HTTP {response.status_code}")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise failed("body is not a JSON object")
        return answer.get("verdict"), answer, failed

    async def ask(
        self, key: IdempotencyKey, attempt: int, *, sent_at: float | None = None
    ) -> LookupAnswer:
        """Ask about a key first sent at ``sent_at``; a not-applied answer has fenced its
        attempts up to ``attempt``."""
        params: dict[str, Any] = {"attempt": attempt}
        if sent_at is not None:
            params["sent_at"] = sent_at
        verdict, answer, failed = await self._verdict(
            f"lookup {self.name}",
            "lookup",
            key=key,
            params=params,
            error=RemoteLookupError,
        )
        if verdict == LookupVerdict.APPLIED.value:
            evidence = answer.get("evidence")
            if evidence is None:
                raise failed("applied without evidence")
            stranger = names_another(answer, evidence, key=key, effect_id=None)
            if stranger:
                raise failed(f"applied, with evidence of another request: {stranger}")
            return LookupAnswer.applied(evidence)
        if verdict == LookupVerdict.NOT_APPLIED.value:
            return LookupAnswer.not_applied()
        if verdict == LookupVerdict.UNKNOWN.value:
            reason = answer.get("reason")
            return LookupAnswer.unknown(reason[:500] if isinstance(reason, str) else None)
        raise failed(f"unrecognised verdict {verdict!r}")

    async def precondition(self, call: EffectCall) -> Precondition:
        """Ask whether the compensation ``call`` may still be applied to the original effect."""
        if call.original_key is None:
            raise ValueError(f"{call.operation} at {self.name} is not a compensation call")
        verdict, answer, failed = await self._verdict(
            f"precondition {self.name}.{call.operation}",
            "precondition",
            key=call.idempotency_key,
            params={"original": call.original_key},
            error=RemotePreconditionError,
        )
        if verdict == PreconditionVerdict.HOLDS.value:
            return Precondition.holds()
        if verdict == PreconditionVerdict.SATISFIED.value:
            evidence = answer.get("evidence")
            if evidence is None:
                raise failed("satisfied without evidence")
            return Precondition.satisfied(evidence)
        if verdict == PreconditionVerdict.VIOLATED.value:
            reason = answer.get("reason")
            if not isinstance(reason, str) or not reason:
                raise failed("violated without a reason")
            return Precondition.violated(reason)
        raise failed(f"unrecognised verdict {verdict!r}")


def remote_participant(
    name: str,
    base_url: str,
    *,
    operations: Mapping[str, Classification | str],
    deduplicates: bool,
    has_lookup: bool,
    timeout_seconds: float = 5.0,
    retry: RetryPolicy | None = None,
    compensations: Mapping[str, str] | None = None,
    preconditions: bool = False,
    lookup_retry: RetryPolicy = DEFAULT_LOOKUP_RETRY,
    key_retention: timedelta | None = None,
) -> RemoteParticipant:
    """Declare a participant served over HTTP at ``base_url``, one effect per operation.

    Example::

        inventory = remote_participant(
            "inventory", "http://127.0.0.1:8800",
            operations={"reserve": "reversible", "release": "reversible"},
            deduplicates=False, has_lookup=True,
        )
        registry.add_participant(inventory)

    ``deduplicates`` and ``has_lookup`` are promises about the service, which the engine relies
    on to resolve UNKNOWN outcomes: declare them only if the service keeps them.

    ``compensations`` maps an operation to the operation that undoes it (``{"book": "cancel"}``);
    each compensating operation is declared with :meth:`Participant.compensation`, under the
    same retry policy and timeout. With ``preconditions`` the service is asked, before each
    compensation, whether it still holds. ``lookup_retry`` says how often and how soon a lookup
    that could not reach the service is asked again before the doubt goes to a person.
    ``key_retention`` is how long the service remembers a key (see :class:`Participant`).
    """
    _check_remote_arguments(name, base_url, operations, compensations, has_lookup=has_lookup)
    participant = RemoteParticipant(
        name,
        base_url,
        deduplicates=deduplicates,
        timeout_seconds=timeout_seconds,
        lookup_retry=lookup_retry,
        key_retention=key_retention,
    )
    policy = retry if retry is not None else DEFAULT_EFFECT_RETRY
    undo = dict(compensations or {})
    for operation, classification in operations.items():
        participant.effect(
            operation,
            classification=classification,
            timeout_seconds=timeout_seconds,
            retry=policy,
            compensation=undo.get(operation),
        )(per_operation(participant.name, operation, participant.apply))
    # Several operations may share one compensation: it is declared once.
    for compensation in dict.fromkeys(undo.values()):
        participant.compensation(
            compensation,
            retry=policy,
            timeout_seconds=timeout_seconds,
            precondition=participant.precondition if preconditions else None,
        )(per_operation(participant.name, compensation, participant.apply))
    if has_lookup:
        participant.lookup(participant.ask)
    return participant


def _check_remote_arguments(
    name: str, base_url: object, operations: object, compensations: object, *, has_lookup: object
) -> None:
    """What ``remote_participant`` is given, each wrong kind refused with what to pass."""
    what = f"remote participant {name}"
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise RegistrationError(
            f"{what}: base_url takes the service's URL as a string, e.g. "
            f"'http://127.0.0.1:8800', not {described(base_url)}"
        )
    check_operations(operations, what=what, example="'reserve': 'reversible'")
    if compensations is not None and not isinstance(compensations, Mapping):
        raise RegistrationError(
            f"{what}: compensations= takes a dict of operation name to the name of the "
            f"operation that undoes it, e.g. compensations={{'book': 'cancel'}}, not "
            f"{arguments.kind_of(compensations)}"
        )
    arguments.flag(has_lookup, what=what, option="has_lookup")
