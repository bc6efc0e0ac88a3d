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
  :class:`~ledgerflow.errors.IdempotencyKeyReusedError`, and nothing is carried out.

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

__all__ = ["IdempotentAnswers", "Replay", "request_hash"]


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


class IdempotentAnswers:
    """The stored answers of one journal."""

    def __init__(self, store: OperatorStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock

    def claim(self, *, scope: str, key: str, request: str) -> Replay | None:
        """Claim ``key`` for ``request`` (None: go ahead), or the answer to replay."""
        now = self._clock.now()
        held = self._store.reserve_idempotency(
            scope=scope,
            key=checked_key(key),
            request_hash=request,
            now=now,
            cutoff=now - limits.IDEMPOTENCY_RETENTION_SECONDS,
        )
        if held is None:
            return None
        if held.request_hash != request:
            raise IdempotencyKeyReusedError(
                "this Idempotency-Key was used for another request (method, path or body); "
                "a retry must repeat the first request exactly, a new request needs a new key",
                key=key,
            )
        if held.status == 0:
            raise IdempotencyKeyReusedError(
                "the first request with this Idempotency-Key is still being answered; retry "
                "in a moment to get its answer",
                key=key,
            )
        return Replay(status=held.status, body=held.body)

    def finish(self, *, scope: str, key: str, status: int, body: str) -> None:
        """Keep the answer to a claimed key."""
        self._store.finish_idempotency(scope=scope, key=key, status=status, body=body)

    def release(self, *, scope: str, key: str) -> None:
        """Free a claimed key whose request could not be answered."""
        self._store.release_idempotency(scope=scope, key=key)
