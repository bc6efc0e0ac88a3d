"""Idempotent POSTs: the first answer to a key is the answer to every retry (internal).

A client that sends a POST with an ``Idempotency-Key`` and loses the answer sends it again
with the same key; it must get the first answer, not a second action. The key is claimed in the
journal *before* the request is carried out, under the caller's scope (its token), with a hash
of the request (method, path, body):

- the key is free: it is claimed, the request is carried out, its answer stored
  (:meth:`IdempotentAnswers.finish`), or the claim released if it could not be answered (a
  server error must not be replayed forever);
- the key holds an answer to the same request: that answer is replayed;
- the key holds another request, or one still being answered:
  :class:`~ledgerflow.errors.IdempotencyKeyReusedError`, and nothing is carried out;
- the key holds the same request, claimed more than ``limits.IDEMPOTENCY_PENDING_SECONDS``
  ago and never answered: its server died while answering it (nothing else leaves a claim
  unanswered that long). The retry takes the claim over and carries the request out again.

Taking over is safe because the claim and the change are not one transaction yet (the one
write path is a later step), and so the change may or may not have committed before the
server died; each route is idempotent by its own identity, so carrying it out again does the
change at most once and answers truthfully for what the ledger now holds: a start is found by
its business key (200, ``created: false``), a signal or a callback by its event id (200, a
repeat), a cancel request stands once (the first wins; the same record), a retirement is a
no-op, a repair whose result is in place is a no-op naming its audit record (or, planned at a
generation, a 409 naming the audit record that moved it), a dry run changes nothing. A claim
is held by its claim time: an answer is kept, and a claim released, only by the request that
holds the claim now, so a slow first request that finishes after a takeover keeps nothing.

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
