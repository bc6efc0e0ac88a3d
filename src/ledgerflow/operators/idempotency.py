"""Idempotent POSTs: the first answer to a key is the answer to every retry (internal).

A client that sends a POST with an ``Idempotency-Key`` and loses the answer sends it again
with the same key; it must get the first answer, not a second action. The key is claimed in the
journal under the caller's scope (its token), with a hash of the request (method, path, body),
in the one transaction that also carries the request out and keeps its answer
(:func:`ledgerflow.web.declare.answer`):

- the key is free: it is claimed, the request is carried out, its answer kept
  (:meth:`IdempotentAnswers.finish`), all in that transaction: a server error or a death
  anywhere in it leaves no claim, no change and no answer, and the retry is the first request;
- the key holds an answer to the same request: that answer is replayed;
- the key holds another request: :class:`~ledgerflow.errors.IdempotencyKeyReusedError`, and
  nothing is carried out. A second request under a key whose first is still being answered
  waits for the first transaction to end (it holds the key's row), then replays its answer;
- a claim never answered (only a journal written by Ledgerflow 0.1.0, which claimed in a
  transaction of its own) of the same request, made more than
  ``limits.IDEMPOTENCY_PENDING_SECONDS`` ago, is taken over by the retry, which carries the
  request out again: each route is idempotent by its own identity (a start by its business
  key, a signal or callback by its event id, a cancel request stands once, a retirement or a
  repair in place is a no-op), so the change is made at most once.

Answers are kept for ``limits.IDEMPOTENCY_RETENTION_SECONDS``; older ones are swept as new keys
arrive, and a key past retention is free again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.errors import IdempotencyKeyReusedError, PayloadError
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.storage.store import OperatorStore

__all__ = ["Claim", "IdempotentAnswers", "Replay", "request_hash"]


def request_hash(method: str, path: str, body: bytes) -> str:
    """What makes two requests "the same request" under one key."""
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def checked_key(key: str) -> str:
    """An Idempotency-Key: 1..200 printable ASCII characters."""
    if not 0 < len(key) <= limits.IDEMPOTENCY_KEY_LENGTH_MAX or not all(
        " " < char <= "~" for char in key
    ):
        raise PayloadError(
            f"an Idempotency-Key is 1 to {limits.IDEMPOTENCY_KEY_LENGTH_MAX} printable ASCII "
            "characters without spaces"
        )
    return key


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """A stored answer to give again."""

    status: int
    body: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A key this request holds now: carry the request out, then keep its answer."""

    scope: str
    key: str
    claimed_at: float


class IdempotentAnswers:
    """The stored answers of one journal."""

    def __init__(self, store: OperatorStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock

    def claim(self, *, scope: str, key: str, request: str) -> Claim | Replay:
        """Claim ``key`` for ``request`` (go ahead), or the answer to replay."""
        now = self._clock.now()
        held = self._store.reserve_idempotency(
            scope=scope,
            key=checked_key(key),
            request_hash=request,
            now=now,
            cutoff=now - limits.IDEMPOTENCY_RETENTION_SECONDS,
            abandoned_before=now - limits.IDEMPOTENCY_PENDING_SECONDS,
        )
        if held is None:
            return Claim(scope=scope, key=key, claimed_at=now)
        if held.request_hash != request:
            raise IdempotencyKeyReusedError(
                "this Idempotency-Key was used for another request (method, path or body); "
                "a retry must repeat the first request exactly, a new request needs a new key",
                key=key,
            )
        if held.status == 0:
            raise IdempotencyKeyReusedError(
                "the first request with this Idempotency-Key is still being answered; retry "
                "in a moment to get its answer (a request that never finishes frees its key "
                f"{limits.IDEMPOTENCY_PENDING_SECONDS:.0f} s after it was sent)",
                key=key,
            )
        return Replay(status=held.status, body=held.body)

    def finish(self, claim: Claim, *, status: int, body: str) -> None:
        """Keep the answer to a claimed key (unless a retry took the claim over)."""
        self._store.finish_idempotency(
            scope=claim.scope, key=claim.key, claimed_at=claim.claimed_at, status=status, body=body
        )

    def release(self, claim: Claim) -> None:
        """Free a claimed key whose request could not be answered."""
        self._store.release_idempotency(
            scope=claim.scope, key=claim.key, claimed_at=claim.claimed_at
        )
