"""The audit log's records and the one write an operator's repair is made of (internal).

An :class:`AuditEntry` is what is appended (never updated); an :class:`AuditRecord` is what is
read back, as an :class:`AuditQuery` selects. A :class:`RepairWrite` is a repair's whole
change: the state it was planned against (the precondition), the fenced writes, an optional
cancel request and its audit entry, applied by the store in one transaction or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.ledger.records import EffectWrite, InstanceWrite, StepWrite
from ledgerflow.model.ids import Generation, InstanceId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.repair import CancelChange

AUDIT_OUTCOMES = ("applied", "no-op", "refused")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    actor: str
    role: str | None
    kind: str
    instance_id: InstanceId | None
    target: str | None
    fingerprint: str
    outcome: str
    reason: str
    evidence: str | None
    # The plan as JSON text ("{}" when the request was refused before a plan existed).
    plan: str
    refusal: str | None = None
    generation_before: Generation | None = None
    generation_after: Generation | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord(AuditEntry):
    """An entry as the log keeps it: numbered, and stamped with when it was appended."""

    audit_id: int
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditQuery:
    """Which audit records to read: the newest ``limit`` that match every filter given (at most
    ``limits.AUDIT_LIMIT_MAX``), listed oldest first."""

    instance_id: InstanceId | None = None
    actor: str | None = None
    kind: str | None = None
    # Epoch seconds: records at or after it.
    since: float | None = None
    # Records of that tenant's instances only (a scoped principal's view of the log).
    tenant: str | None = None
    # Records older than this one (paging back through the log).
    before_id: int | None = None
    limit: int = limits.AUDIT_LIMIT_DEFAULT


@dataclass(frozen=True, slots=True, kw_only=True)
class PositionMove:
    """A journal position moved by a migration. The effect there (if any) is written back
    with ``effect_id`` and ``idempotency_key``: the ones it was minted with, never new ones."""

    from_seq: int
    to_seq: int
    effect_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContractRemap:
    """A migration maps the payload of the effect at (new) position ``seq`` from an old
    participant contract: the step's input becomes ``input`` (what the new code sends) and the
    effect's contract version ``contract_version``. The effect's recorded payload, id and key
    stay as they are: the payload is the evidence of what the participant took."""

    seq: int
    input: str
    contract_version: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Repin:
    """Pin an instance to another definition: only if it is still pinned to the expected one."""

    expected_version: int
    expected_fingerprint: str
    version: int
    fingerprint: str
    moves: tuple[PositionMove, ...] = ()
    contracts: tuple[ContractRemap, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairWrite:
    """One repair, applied all or nothing with its audit entry.

    ``fence`` takes the instance from any owner whose lease has lapsed and bumps its
    generation, so a stale worker's next write is refused; a live lease refuses the repair.
    A pure cancel request does not fence: the owner honours it at its next step.
    """

    instance_id: InstanceId
    expected_generation: Generation
    expected_status: InstanceStatus
    fence: bool
    writes: tuple[StepWrite | EffectWrite | InstanceWrite, ...]
    # The cancel request a repair plan makes, written as the plan states it.
    cancel: CancelChange | None
    audit: AuditEntry
    # An upgrade or a migration: the definition the instance is pinned to from now on, and
    # the journal positions that move (see :class:`Repin`).
    repin: Repin | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Adoption:
    """A worker's adoption of an instance onto its own code of the same workflow and version:
    the instance as the replay read it (generation, pin), the code it moves to, when the
    workers that count as live last beat, and the audit record (the worker, the verdict)."""

    instance_id: InstanceId
    workflow_name: str
    workflow_version: int
    expected_generation: Generation
    expected_fingerprint: str
    fingerprint: str
    live_since: float
    audit: AuditEntry
