"""Definition versions' records: the oldest instance in flight on each, retired versions and
the evidence a retirement is decided on (internal).

The operators' tool (:mod:`ledgerflow.operators.versions`) decides what they mean; the store
only reads and keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlight:
    """The oldest instance of one definition version and fingerprint that has not ended for
    good (parked ones count: an operator may resume them)."""

    workflow_name: str
    workflow_version: int
    fingerprint: str
    instance_id: str
    status: str
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RetiredVersion:
    """A workflow version no new instance may start on, with who retired it and its audit
    record (which holds the evidence)."""

    workflow_name: str
    workflow_version: int
    retired_at: float
    retired_by: str
    reason: str
    audit_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetirementEvidence:
    """What the journal holds of one workflow version when its retirement is asked for, read
    in the retirement's own transaction: instances per status (every tenant), how many have
    not ended for good and the oldest of them, and the last one that ended."""

    workflow_name: str
    workflow_version: int
    statuses: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    oldest_in_flight_id: str | None = None
    oldest_in_flight_at: float | None = None
    last_ended_id: str | None = None
    last_ended_status: str | None = None
    last_ended_at: float | None = None
    # Set when the version was retired before (the retirement is then a no-op).
    retired: RetiredVersion | None = None
