"""The attention queue's records, as the store reads them back (internal).

An :class:`AttentionFlag` is an open or cleared flag on an instance. The queue reads what needs
a person, as an :class:`AttentionQuery` selects, as :class:`ParkedInstance` and
:class:`FlaggedInstance` rows, and for each instance the :class:`EffectToSettle` rows a repair
settles. Their instance columns are plain values, not an
:class:`~ledgerflow.ledger.records.InstanceRecord`: a row damaged past reading as a record must
still reach the queue, which is where a person finds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.model.ids import IdempotencyKey, InstanceId, StepSeq


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionFlag:
    """Detection (or reconciliation) found that an instance needs a person, while the instance
    stays where it is; ``cleared_at`` is set when the condition went away or someone settled it."""

    flag_id: int
    instance_id: InstanceId
    reason_code: str
    evidence: str
    detected_at: float
    detected_by: str
    cleared_at: float | None = None
    cleared_by: str | None = None
    cleared_reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionQuery:
    """Which part of the queue to read: each filter given must match (``reason`` is a reason
    code such as ``poison_step``); oldest first, at most ``limit``."""

    tenant: str | None = None
    workflow: str | None = None
    reason: str | None = None
    limit: int = limits.ATTENTION_LIMIT_DEFAULT


@dataclass(frozen=True, slots=True, kw_only=True)
class ParkedInstance:
    """An instance in MANUAL_INTERVENTION or FORWARD_RECOVERY_REQUIRED: an operator decides."""

    instance_id: InstanceId
    tenant: str
    workflow_name: str
    business_key: str
    status: str
    reason_code: str | None
    reason: str | None
    # When it was parked (its last change).
    since: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FlaggedInstance:
    """An open flag with what is known of its instance (None where the instance is gone)."""

    flag_id: int
    instance_id: InstanceId
    reason_code: str
    evidence: str
    # When the flag was raised, and by whom ("scan:<worker>", "claim:<worker>", ...).
    since: float
    detected_by: str
    tenant: str | None
    workflow_name: str | None
    business_key: str | None
    status: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectToSettle:
    """An effect in doubt (UNKNOWN) or a compensation that failed: what a repair settles."""

    seq: StepSeq
    participant: str
    operation: str
    idempotency_key: IdempotencyKey
    state: str
    attempt: int
    # The effect this one undoes, when it is a compensation.
    compensates: str | None
    reason: str | None
