"""What an operator sees of one instance at the command line (internal): ``ledgerflow show``."""

from __future__ import annotations

from dataclasses import dataclass

from ledgerflow.ledger.attention import AttentionFlag
from ledgerflow.ledger.audit import AuditQuery, AuditRecord
from ledgerflow.runtime.engine import InstanceDetail
from ledgerflow.storage.store import OperatorStore

# The audit records ``show`` lists under an instance's timeline, at most.
SHOW_AUDIT_MAX = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceReport:
    """What an operator sees of one instance (``ledgerflow show``): its ledgers, the audit
    records of the changes made to it from outside (starts, signals, cancels, repairs) and
    its open attention flags."""

    detail: InstanceDetail
    audit: list[AuditRecord]
    flags: list[AttentionFlag]


def instance_report(store: OperatorStore, detail: InstanceDetail) -> InstanceReport:
    found = detail.instance.instance_id
    return InstanceReport(
        detail=detail,
        audit=store.audit_records(AuditQuery(instance_id=found, limit=SHOW_AUDIT_MAX)),
        flags=store.open_flags(found),
    )
