"""Definition versions as an operator sees them, and retiring one with evidence (internal).

:func:`version_summaries` answers ``ledgerflow versions``: per workflow, version and
fingerprint, the instances by status, how many are in flight and the oldest of them, and
whether the version is retired. "In flight" is every instance that has not ended for good:
parked ones count, since an operator may resume them.

:func:`retire_version` is ``ledgerflow versions retire W@N``: refused (on the record) while any
instance in flight is pinned to the version, otherwise the version is retired in one
transaction with its audit record, whose evidence says what the journal held: instances per
status, the last one that ended and when, who retired it and when. A retired version starts no
new instance (:class:`~ledgerflow.errors.VersionRetiredError`); a repeat is a no-op that says
so.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgerflow.errors import PayloadError, RepairRefusedError
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.versions import RetirementEvidence
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.model.routing import Served
from ledgerflow.operators.actions import RETIRE_VERSION
from ledgerflow.runtime.clock import Clock
from ledgerflow.storage.store import OperatorStore

_FINAL = {s.value for s in FINAL_STATUSES}


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionSummary:
    """One definition version and fingerprint as the journal holds it (of one tenant, or all).

    ``served_by`` names the live workers that can run it (they serve this workflow, version
    and fingerprint), from the worker registry; empty when none is live, never guessed.
    """

    workflow_name: str
    workflow_version: int
    fingerprint: str
    statuses: dict[str, int]
    in_flight: int
    oldest_in_flight_id: str | None
    oldest_in_flight_at: float | None
    retired: bool
    retired_at: float | None = None
    retired_by: str | None = None
    served_by: list[str] = field(default_factory=list)

    @property
    def instances(self) -> int:
        return sum(self.statuses.values())

    def to_json(self, *, now: float) -> dict[str, Any]:
        out = asdict(self)
        out["instances"] = self.instances
        out["oldest_in_flight_age_seconds"] = (
            None if self.oldest_in_flight_at is None else round(now - self.oldest_in_flight_at, 3)
        )
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Retirement:
    """What ``retire`` did: ``applied`` or ``no-op`` (retired before), with its evidence."""

    outcome: str
    audit_id: int
    evidence: RetirementEvidence
    message: str


def version_summaries(
    store: OperatorStore, *, tenant: str | None, live: Sequence[WorkerRecord] = ()
) -> list[VersionSummary]:
    """Every workflow version and fingerprint the journal holds instances of (newest version
    first per workflow), and every retired version, with its in-flight evidence and which of
    the ``live`` workers serve it."""
    statuses: dict[tuple[str, int, str], dict[str, int]] = defaultdict(dict)
    for count in store.version_counts(tenant=tenant):
        key = (count.workflow_name, count.workflow_version, count.fingerprint)
        statuses[key][count.status] = count.instances
    oldest = {
        (o.workflow_name, o.workflow_version, o.fingerprint): o
        for o in store.oldest_in_flight(tenant=tenant)
    }
    retired = {(r.workflow_name, r.workflow_version): r for r in store.retired_versions()}
    for name, version in retired:
        if not any(k[:2] == (name, version) for k in statuses):
            statuses[(name, version, "")] = {}
    summaries = []
    for key in sorted(statuses, key=lambda k: (k[0], -k[1], k[2])):
        found, gone = oldest.get(key), retired.get(key[:2])
        summaries.append(
            VersionSummary(
                workflow_name=key[0],
                workflow_version=key[1],
                fingerprint=key[2],
                statuses=dict(sorted(statuses[key].items())),
                in_flight=sum(n for s, n in statuses[key].items() if s not in _FINAL),
                oldest_in_flight_id=found.instance_id if found else None,
                oldest_in_flight_at=found.created_at if found else None,
                retired=gone is not None,
                retired_at=gone.retired_at if gone else None,
                retired_by=gone.retired_by if gone else None,
                served_by=[w.worker_id for w in live if Served(*key) in w.serves],
            )
        )
    return summaries


def parse_target(text: str) -> tuple[str, int]:
    """``W@N`` as (workflow, version), or a clear error."""
    name, at, number = text.rpartition("@")
    if not at or not name or not number.isdigit() or int(number) < 1:
        raise PayloadError(f"a version is named WORKFLOW@N (for example order@1), not {text!r}")
    return name, int(number)


def retire_version(
    store: OperatorStore,
    clock: Clock,
    *,
    workflow: str,
    version: int,
    actor: str,
    role: str | None,
    reason: str,
) -> Retirement:
    """Retire ``workflow`` v``version`` with its evidence on the audit record, or refuse (on
    the record too, then :class:`RepairRefusedError`) while instances in flight are pinned
    to it."""
    target = f"{workflow}@{version}"
    reason = reason.strip() or "(none given)"
    # The evidence, the retirement and its audit record: one transaction, so the record says
    # what the journal held when the version was retired, and nothing started in between.
    with store.transaction():
        evidence = store.retirement_evidence(workflow, version)
        audit_id: int | None = None
        if not evidence.in_flight:
            outcome = "no-op" if evidence.retired is not None else "applied"
            entry = _entry(evidence, actor=actor, role=role, reason=reason, outcome=outcome)
            audit_id = store.append_audit(entry, now=clock.now())
            if evidence.retired is None:
                store.retire_version(
                    workflow,
                    version,
                    retired_by=actor,
                    reason=reason,
                    audit_id=audit_id,
                    now=clock.now(),
                )
    if audit_id is None:
        refusal = _refusal(evidence)
        refused = _entry(evidence, actor=actor, role=role, reason=reason, outcome="refused")
        refused = AuditEntry(**{**asdict(refused), "refusal": refusal})
        store.append_audit(refused, now=clock.now())
        raise RepairRefusedError(f"{target} cannot be retired: {refusal}")
    if evidence.retired is not None:
        message = f"{target} was already retired by {evidence.retired.retired_by}; nothing changed"
        return Retirement(outcome="no-op", audit_id=audit_id, evidence=evidence, message=message)
    ended = (
        f"the last one ended {evidence.last_ended_status} ({evidence.last_ended_id})"
        if evidence.last_ended_id
        else "none ever started"
    )
    total = sum(evidence.statuses.values())
    message = f"{target} is retired: {total} instance(s), none in flight; {ended}"
    return Retirement(outcome="applied", audit_id=audit_id, evidence=evidence, message=message)


def _refusal(evidence: RetirementEvidence) -> str:
    return (
        f"{evidence.in_flight} instance(s) that have not ended are pinned to it, the oldest "
        f"{evidence.oldest_in_flight_id}; let them finish (or move them) first"
    )


def _entry(
    evidence: RetirementEvidence, *, actor: str, role: str | None, reason: str, outcome: str
) -> AuditEntry:
    target = f"{evidence.workflow_name}@{evidence.workflow_version}"
    plan = json.dumps(
        {"workflow": evidence.workflow_name, "version": evidence.workflow_version},
        sort_keys=True,
    )
    facts = {
        "statuses": evidence.statuses,
        "in_flight": evidence.in_flight,
        "oldest_in_flight_id": evidence.oldest_in_flight_id,
        "last_ended_id": evidence.last_ended_id,
        "last_ended_status": evidence.last_ended_status,
        "last_ended_at": evidence.last_ended_at,
    }
    identity = json.dumps([RETIRE_VERSION, target], sort_keys=True)
    return AuditEntry(
        actor=actor,
        role=role,
        kind=RETIRE_VERSION,
        instance_id=None,
        target=target,
        fingerprint=hashlib.sha256(identity.encode()).hexdigest(),
        outcome=outcome,
        reason=reason[:1000],
        evidence=json.dumps(facts, sort_keys=True),
        plan=plan,
    )
