"""The contract check: a real participant exercised against what its declaration claims.

``ledgerflow check-participant`` runs this. Each claim the engine relies on to settle an
UNKNOWN outcome is put to the participant with requests of its own, under keys no real traffic
uses (``lf-check-<uuid>-...``), and judged with the reading rules of
:mod:`ledgerflow.participant.remote` (a receipt must name its request). The check APPLIES REAL
EFFECTS: point it at a test instance of the service.

The claims, in the order they are put:

- ``dedupe`` (declared ``deduplicates``): the same key sent again, as the engine re-sends it
  (a higher attempt), is answered with the first application's receipt.
- ``lookup-before``: a lookup of a key never sent answers not-applied.
- ``fence``: after that not-applied (attempt 1), the original with attempt 1 is not applied,
  and the engine's re-dispatch (attempt 2) is.
- ``lookup-during``: lookups sent while an application's answer is still unknown to the
  checker. Over plain HTTP nobody can hold the participant half-way through applying, so
  "during" is the engine's own position after a timeout: the request was sent, its answer not
  read. Each lookup is started once the apply request was written and the report says which
  were answered before the apply's answer arrived. Whichever side of the application a lookup
  fell, its verdict must agree with it: not-applied fences attempt 1, so the apply must then
  not apply; applied must name this key; and a lookup after the answer must agree too.
- ``lookup-after``: an applied key's lookup answers applied, with evidence naming the key.
- ``compensation-key`` (a compensation is declared): the compensation's key
  (``compensate:`` + the original's) is applied as a request of its own, never answered with
  the original's receipt, and the original stays applied.
- ``key-window``: the participant remembers keys at least as long as the engine may send or
  look one up again (:func:`retry_horizon`), by what the declaration states
  (``key_retention``) and what the service reports (``key_retention_seconds`` in its applied
  answers). A window nobody states is not claimed, and the report says so.

A transport carries the requests and reads their answers as the engine reads them, so the claims
are written once: :class:`HttpTransport` speaks the HTTP protocol of ``remote.py``, and
:mod:`ledgerflow.participant.check_broker` publishes over RabbitMQ or NATS JetStream.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from ledgerflow.errors import ParticipantUnreachableError
from ledgerflow.model.definition import EffectDeclaration, Participant
from ledgerflow.model.ids import compensation_key
from ledgerflow.participant.remote import names_another

CHECK_PREFIX = "lf-check-"
TIMEOUT_SECONDS_DEFAULT = 10.0
# Lookups put while one application's answer is awaited, at most.
DURING_LOOKUPS_MAX = 5


class ClaimStatus(enum.StrEnum):
    PROVEN = "proven"
    REFUTED = "refuted"
    NOT_CLAIMED = "not claimed"


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request and its answer, as evidence; times in seconds since the check began."""

    what: str
    request: dict[str, Any]
    status: int | None
    answer: Any
    sent_at: float
    answered_at: float

    def to_record(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "request": self.request,
            "status": self.status,
            "answer": self.answer,
            "sent_at": round(self.sent_at, 4),
            "answered_at": round(self.answered_at, 4),
        }


@dataclass(slots=True)
class Claim:
    name: str
    status: ClaimStatus
    summary: str
    evidence: list[Exchange] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return {
            "claim": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "detail": self.detail,
            "evidence": [e.to_record() for e in self.evidence],
        }


@dataclass(slots=True)
class Report:
    participant: str
    target: str
    run: str
    claims: list[Claim]

    @property
    def refuted(self) -> list[Claim]:
        return [c for c in self.claims if c.status is ClaimStatus.REFUTED]

    def to_record(self) -> dict[str, Any]:
        counts = {s.value: sum(c.status is s for c in self.claims) for s in ClaimStatus}
        return {
            "participant": self.participant,
            "target": self.target,
            "run": self.run,
            "counts": counts,
            "claims": [c.to_record() for c in self.claims],
        }


class Transport(Protocol):
    """How the check reaches the participant (one apply, one lookup, each kept as evidence)
    and how the engine reads what came back over that way."""

    target: str

    async def apply(self, body: dict[str, Any]) -> Exchange: ...

    async def lookup(self, key: str, attempt: int) -> Exchange: ...

    def receipt(self, exchange: Exchange, key: str, effect_id: str) -> Any:
        """The receipt of an applied answer that names its request, or None."""

    def rejected(self, exchange: Exchange) -> bool:
        """An explicit rejection, the only answer that proves nothing was applied."""

    def verdict(self, exchange: Exchange, key: str) -> str:
        """A lookup's verdict: ``applied``, ``not-applied``, ``unknown`` or ``no answer``."""

    async def aclose(self) -> None: ...


class HttpTransport:
    """The HTTP protocol of :mod:`ledgerflow.participant.remote`, at ``base_url``."""

    def __init__(self, base_url: str, name: str, *, timeout_seconds: float, clock: Clock) -> None:
        self.target = base_url.rstrip("/")
        self._name = name
        self._clock = clock
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_seconds))

    async def _send(self, what: str, request: httpx.Request, shown: dict[str, Any]) -> Exchange:
        sent = self._clock()
        try:
            response = await self._client.send(request)
        except httpx.ConnectError as error:
            raise ParticipantUnreachableError(
                f"participant {self._name} at {self.target} cannot be reached: {error}",
                url=self.target,
            ) from None
        except httpx.HTTPError as error:
            # Sent, or perhaps sent: no answer is itself the evidence.
            why = f"{type(error).__name__}: {error}"
            return Exchange(what, shown, None, why, sent, self._clock())
        try:
            answer: Any = response.json()
        except ValueError:
            answer = response.text[:500]
        return Exchange(what, shown, response.status_code, answer, sent, self._clock())

    async def apply(self, body: dict[str, Any]) -> Exchange:
        path = f"/{self._name}/apply"
        request = self._client.build_request(
            "POST",
            self.target + path,
            content=json.dumps(body),
            headers={"content-type": "application/json"},
        )
        return await self._send("apply", request, {"POST": path, "body": body})

    async def lookup(self, key: str, attempt: int) -> Exchange:
        path = f"/{self._name}/lookup/{quote(key, safe='')}"
        request = self._client.build_request("GET", self.target + path, params={"attempt": attempt})
        return await self._send("lookup", request, {"GET": f"{path}?attempt={attempt}"})

    def receipt(self, exchange: Exchange, key: str, effect_id: str) -> Any:
        return applied_receipt(exchange, key, effect_id)

    def rejected(self, exchange: Exchange) -> bool:
        answer = exchange.answer
        return (
            exchange.status in (409, 422)
            and isinstance(answer, dict)
            and answer.get("status") == "rejected"
        )

    def verdict(self, exchange: Exchange, key: str) -> str:
        return verdict(exchange, key)

    async def aclose(self) -> None:
        await self._client.aclose()


class Clock(Protocol):
    def __call__(self) -> float: ...


def retry_horizon(participant: Participant) -> tuple[timedelta, dict[str, float]]:
    """How long after a key is first sent the engine may still send it again or look it up, at
    most, over the participant's effects: each attempt's timeout (and callback wait), each
    UNKNOWN's lookups with their pauses (when there is a lookup), and the pauses between
    attempts. A person's repair may re-send a key later still; no window can cover that."""
    lookups = participant.lookup_function is not None
    per_effect: dict[str, float] = {}
    for declaration in participant.effects.values():
        per_effect[declaration.operation] = _horizon(declaration, lookups=lookups).total_seconds()
    longest = max(per_effect.values(), default=0.0)
    return timedelta(seconds=longest), per_effect


def _horizon(declaration: EffectDeclaration, *, lookups: bool) -> timedelta:
    timeout = timedelta(seconds=declaration.timeout_seconds)
    wait = timeout + timedelta(seconds=declaration.completes_by_callback or 0)
    asking = timedelta(0)
    if lookups:
        policy = declaration.participant.lookup_retry
        asking = policy.attempts_max * timeout + policy.pauses_total()
    attempts = declaration.retry.attempts_max
    return attempts * (wait + asking) + declaration.retry.pauses_total()


def applied_receipt(exchange: Exchange, key: str, effect_id: str | None) -> Any:
    """The receipt of an applied answer that names its request, or None."""
    answer = exchange.answer
    if exchange.status != 200 or not isinstance(answer, dict):
        return None
    receipt = answer.get("receipt")
    if answer.get("status") != "applied" or receipt is None:
        return None
    return None if names_another(answer, receipt, key=key, effect_id=effect_id) else receipt


def verdict(exchange: Exchange, key: str) -> str:
    """A lookup's verdict as the engine reads it: ``applied`` only with evidence naming the
    key; anything unreadable is ``no answer``."""
    answer = exchange.answer
    if exchange.status != 200 or not isinstance(answer, dict):
        return "no answer"
    found = answer.get("verdict")
    if found == "applied":
        evidence = answer.get("evidence")
        if evidence is None or names_another(answer, evidence, key=key, effect_id=None):
            return "no answer"
    return found if found in ("applied", "not-applied", "unknown") else "no answer"


class Checker:
    """Puts each claim of ``participant`` to it through ``transport``, under keys of one run."""

    def __init__(
        self,
        participant: Participant,
        transport: Transport,
        *,
        operation: str,
        payload: Any,
        clock: Clock,
        run: str | None = None,
    ) -> None:
        self.participant = participant
        self.transport = transport
        self.operation = operation
        self.payload = payload
        self.clock = clock
        self.run = run or f"{CHECK_PREFIX}{uuid.uuid4()}"
        self.reported_windows: list[tuple[float, Exchange]] = []

    def key(self, claim: str) -> str:
        return f"{self.run}-{claim}"

    async def apply(
        self, key: str, attempt: int, *, operation: str | None = None, original: str | None = None
    ) -> tuple[Exchange, Any]:
        """Send one application; the exchange and its receipt (None unless applied)."""
        body: dict[str, Any] = {
            "key": key,
            "operation": operation or self.operation,
            "payload": self.payload,
            "effect_id": f"{key}/effect",
            "instance_id": self.run,
            "attempt": attempt,
        }
        if original is not None:
            body["original_key"] = original
        exchange = await self.transport.apply(body)
        receipt = self.transport.receipt(exchange, key, body["effect_id"])
        window = exchange.answer.get("key_retention_seconds") if receipt is not None else None
        if isinstance(window, int | float) and not isinstance(window, bool):
            self.reported_windows.append((float(window), exchange))
        return exchange, receipt

    async def lookup(self, key: str, attempt: int) -> tuple[Exchange, str]:
        exchange = await self.transport.lookup(key, attempt)
        return exchange, self.transport.verdict(exchange, key)

    async def run_all(self) -> Report:
        lookups = self.participant.lookup_function is not None
        claims = [
            await self._dedupe() if self.participant.deduplicates else _skip("dedupe", "dedupe"),
        ]
        for name, check in (
            ("lookup-before", self._lookup_before),
            ("fence", self._fence),
            ("lookup-during", self._lookup_during),
            ("lookup-after", self._lookup_after),
        ):
            claims.append(await check() if lookups else _skip(name, "lookup"))
        claims.append(await self._compensation_key())
        claims.append(self._key_window())
        return Report(self.participant.name, self.transport.target, self.run, claims)

    async def _dedupe(self) -> Claim:
        key = self.key("dedupe")
        first, receipt = await self.apply(key, 1)
        if receipt is None:
            return _refuted("dedupe", "a first application of a fresh key was not applied", first)
        again, repeat = await self.apply(key, 2)
        if repeat != receipt:
            return _refuted(
                "dedupe",
                "the same key sent again was applied again: its answer is not the first receipt",
                first,
                again,
            )
        return _proven("dedupe", "the same key sent again answered the first receipt", first, again)

    async def _lookup_before(self) -> Claim:
        key = self.key("before")
        asked, found = await self.lookup(key, 1)
        if found != "not-applied":
            return _refuted("lookup-before", f"a key never sent was answered {found}", asked)
        return _proven("lookup-before", "a key never sent is not applied", asked)

    async def _fence(self) -> Claim:
        key = self.key("fence")
        asked, found = await self.lookup(key, 1)
        if found != "not-applied":
            return _refuted("fence", f"the fencing lookup answered {found}", asked)
        late, late_receipt = await self.apply(key, 1)
        if late_receipt is not None or not self.transport.rejected(late):
            why = "applied" if late_receipt is not None else "answered without a rejection"
            return _refuted(
                "fence", f"a late original (attempt 1) after not-applied was {why}", asked, late
            )
        redispatch, receipt = await self.apply(key, 2)
        if receipt is None:
            return _refuted(
                "fence",
                "the engine's re-dispatch (attempt 2) after the fence was not applied",
                asked,
                late,
                redispatch,
            )
        return _proven(
            "fence",
            "after not-applied the late original was refused and the re-dispatch applied",
            asked,
            late,
            redispatch,
        )

    async def _lookup_during(self) -> Claim:
        key = self.key("during")
        sending = asyncio.create_task(self.apply(key, 1))
        asked: list[tuple[Exchange, str]] = []
        while not sending.done() and len(asked) < DURING_LOOKUPS_MAX:
            asked.append(await self.lookup(key, 1))
        applied, receipt = await sending
        after, found_after = await self.lookup(key, 1)
        evidence = [applied, *(e for e, _ in asked), after]
        overlapped = sum(e.answered_at <= applied.answered_at for e, _ in asked)
        detail = {"lookups_during": len(asked), "answered_before_the_apply": overlapped}
        fenced = any(found == "not-applied" for _, found in asked)
        if receipt is not None and fenced:
            why = "a lookup answered not-applied (fencing attempt 1), yet the apply applied"
            return _refuted("lookup-during", why, *evidence, detail=detail)
        if receipt is None and any(found == "applied" for _, found in asked):
            why = "a lookup answered applied, yet the apply was not applied"
            return _refuted("lookup-during", why, *evidence, detail=detail)
        settled = "applied" if receipt is not None else "not-applied"
        if receipt is None and not self.transport.rejected(applied):
            settled = "unknown"  # the apply's answer proves nothing: nothing to hold it to
        if settled != "unknown" and found_after != settled:
            why = f"the apply was {settled}, and the lookup after it answered {found_after}"
            return _refuted("lookup-during", why, *evidence, detail=detail)
        return _proven(
            "lookup-during",
            f"{len(asked)} lookup(s) while the answer was awaited ({overlapped} answered before "
            f"it) and one after agree with the application ({settled})",
            *evidence,
            detail=detail,
        )

    async def _lookup_after(self) -> Claim:
        key = self.key("after")
        applied, receipt = await self.apply(key, 1)
        if receipt is None:
            return _refuted("lookup-after", "a fresh key was not applied", applied)
        asked, found = await self.lookup(key, 1)
        if found != "applied":
            return _refuted("lookup-after", f"an applied key was answered {found}", applied, asked)
        return _proven("lookup-after", "an applied key is answered applied", applied, asked)

    async def _compensation_key(self) -> Claim:
        pairs = [
            (d.operation, d.compensation)
            for d in self.participant.effects.values()
            if d.compensation is not None
        ]
        if not pairs:
            return Claim(
                "compensation-key",
                ClaimStatus.NOT_CLAIMED,
                "no effect of this participant declares a compensation",
            )
        operation, compensation = next(
            (pair for pair in pairs if pair[0] == self.operation), pairs[0]
        )
        key = self.key("original")
        undo = compensation_key(key)  # type: ignore[arg-type]
        first, receipt = await self.apply(key, 1, operation=operation)
        if receipt is None:
            return _refuted("compensation-key", f"the original {operation} was not applied", first)
        undone, undo_receipt = await self.apply(undo, 1, operation=compensation, original=key)
        if undo_receipt is None or undo_receipt == receipt:
            why = (
                "answered with the original's receipt" if undo_receipt == receipt else "not applied"
            )
            return _refuted(
                "compensation-key", f"the compensation under {undo!r} was {why}", first, undone
            )
        evidence = [first, undone]
        if self.participant.lookup_function is not None:
            asked, found = await self.lookup(key, 1)
            evidence.append(asked)
            if found != "applied":
                why = f"after its compensation the original's lookup answered {found}"
                return _refuted("compensation-key", why, *evidence)
        return _proven(
            "compensation-key",
            f"{compensation} under {undo!r} applied as its own request beside the original",
            *evidence,
        )

    def _key_window(self) -> Claim:
        if not (self.participant.deduplicates or self.participant.lookup_function):
            return _skip("key-window", "dedupe or a lookup")
        horizon, per_effect = retry_horizon(self.participant)
        declared = self.participant.key_retention
        detail: dict[str, Any] = {
            "horizon_seconds": horizon.total_seconds(),
            "horizon_per_effect_seconds": per_effect,
            "declared_seconds": None if declared is None else declared.total_seconds(),
            "reported_seconds": None,
        }
        evidence: list[Exchange] = []
        if self.reported_windows:
            shortest, exchange = min(self.reported_windows, key=lambda pair: pair[0])
            detail["reported_seconds"] = shortest
            evidence.append(exchange)
        stated = [v for v in (detail["declared_seconds"], detail["reported_seconds"]) if v]
        if not stated:
            return Claim(
                "key-window",
                ClaimStatus.NOT_CLAIMED,
                f"neither the declaration (key_retention) nor the service "
                f"(key_retention_seconds) states a key window; the engine may send a key "
                f"again for up to {_seconds(horizon.total_seconds())}",
                detail=detail,
            )
        window = min(stated)
        reported = detail["reported_seconds"]
        if reported is not None and declared is not None and reported < declared.total_seconds():
            why = (
                f"the service reports keeping keys {_seconds(reported)}, "
                f"less than the {_seconds(declared.total_seconds())} declared"
            )
            return _refuted("key-window", why, *evidence, detail=detail)
        if window < horizon.total_seconds():
            why = (
                f"keys are kept {_seconds(window)}, less than the engine's retry horizon of "
                f"{_seconds(horizon.total_seconds())}"
            )
            return _refuted("key-window", why, *evidence, detail=detail)
        source = "reported" if reported is not None else "declared; the service reports none"
        return _proven(
            "key-window",
            f"keys are kept {_seconds(window)} ({source}), at least the retry horizon of "
            f"{_seconds(horizon.total_seconds())}",
            *evidence,
            detail=detail,
        )


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _skip(name: str, promise: str) -> Claim:
    return Claim(name, ClaimStatus.NOT_CLAIMED, f"the declaration does not claim {promise}")


def _proven(name: str, summary: str, *evidence: Exchange, **more: Any) -> Claim:
    return Claim(name, ClaimStatus.PROVEN, summary, list(evidence), more.get("detail", {}))


def _refuted(name: str, summary: str, *evidence: Exchange, **more: Any) -> Claim:
    return Claim(name, ClaimStatus.REFUTED, summary, list(evidence), more.get("detail", {}))


async def check_participant(
    participant: Participant,
    transport: Transport,
    *,
    operation: str,
    payload: Any,
    clock: Clock,
) -> Report:
    """Put every claim of ``participant`` to it; the transport is closed at the end."""
    try:
        return await Checker(
            participant, transport, operation=operation, payload=payload, clock=clock
        ).run_all()
    finally:
        await transport.aclose()


def started_clock() -> Clock:
    """Seconds since now, for the exchanges' times."""
    began = time.monotonic()
    return lambda: time.monotonic() - began
