"""The perimeter's records: API tokens, console sessions and stored idempotent answers
(internal).

A token row never holds its secret, only the secret's SHA-256 (``secret_hash``); a session
row holds its cookie's SHA-256. The operators' tools (:mod:`ledgerflow.operators.tokens`,
:mod:`ledgerflow.operators.idempotency`) decide what the rows mean; the store only keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiToken:
    token_id: str
    name: str
    role: str
    tenant: str
    secret_hash: str
    created_at: float
    created_by: str
    revoked_at: float | None = None
    revoked_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleSession:
    session_hash: str
    token_id: str
    csrf_token: str
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyRecord:
    """The first answer to a request sent with an idempotency key (``status`` 0: still being
    answered)."""

    scope: str
    idempotency_key: str
    request_hash: str
    status: int
    body: str
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceQuery:
    """Which instances a listing wants (every filter optional) and the page after ``after``,
    a ``(created_at, instance_id)`` position, newest first."""

    tenant: str | None = None
    workflow_name: str | None = None
    workflow_version: int | None = None
    status: str | None = None
    key_prefix: str | None = None
    flagged: bool | None = None
    # The instance's reason code (a parked instance's: why it waits for a person).
    reason_code: str | None = None
    created_from: float | None = None
    created_until: float | None = None
    after: tuple[float, str] | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionCount:
    """How many instances of one definition version and fingerprint are in one status."""

    workflow_name: str
    workflow_version: int
    fingerprint: str
    status: str
    instances: int
    first_created_at: float
    last_created_at: float
