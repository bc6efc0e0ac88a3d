"""The operator's queue: everything that needs a person, oldest first.

Two kinds of item: a *parked* instance (MANUAL_INTERVENTION or FORWARD_RECOVERY_REQUIRED: the
engine stopped and an operator must decide) and an open *flag* (the instance stays where it
is, but detection or reconciliation found something a person should look at). Each item
carries its reason code, the reason or evidence in words, since when, and, for its instance,
the effects in doubt (UNKNOWN) and the compensations that failed, which are what a repair
settles. The queue only reads; repairs are ``operators/repairs.py``.

Example::

    for item in attention(store, AttentionQuery(reason="poison_step", limit=20)):
        print(item.since, item.instance_id, item.reason_code, item.reason)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ledgerflow import limits
from ledgerflow.ledger.attention import (
    AttentionQuery,
    EffectToSettle,
    FlaggedInstance,
    ParkedInstance,
)
from ledgerflow.storage.store import OperatorStore


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionItem:
    kind: str  # "parked" or "flag"
    instance_id: str
    tenant: str | None
    workflow_name: str | None
    business_key: str | None
    # The instance's status as stored (None when the flag names an instance that is gone).
    status: str | None
    reason_code: str | None
    # Why it was parked, or the flag's evidence.
    reason: str | None
    # When it was parked (its last change) or the flag was raised.
    since: float
    # Who raised the flag ("scan:<worker>", "claim:<worker>", ...); None for a parked instance.
    detected_by: str | None = None
    # "participant.operation key K (step N, attempt A)" for each effect in doubt.
    effects_in_doubt: tuple[str, ...] = ()
    failed_compensations: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "instance_id": self.instance_id,
            "tenant": self.tenant,
            "workflow_name": self.workflow_name,
            # The old name of workflow_name (issue 24), kept until 0.3.0 for readers of it.
            "workflow": self.workflow_name,
            "business_key": self.business_key,
            "status": self.status,
            "reason_code": self.reason_code,
            "reason": self.reason,
            "since": self.since,
            "detected_by": self.detected_by,
            "effects_in_doubt": list(self.effects_in_doubt),
            "failed_compensations": list(self.failed_compensations),
        }


def _effect_line(effect: EffectToSettle) -> str:
    return (
        f"{effect.participant}.{effect.operation} key {effect.idempotency_key} "
        f"(step {effect.seq}, attempt {effect.attempt}, {effect.state})"
    )


def _item(row: ParkedInstance | FlaggedInstance, store: OperatorStore) -> AttentionItem:
    effects = store.attention_effects(row.instance_id)
    return AttentionItem(
        kind="parked" if isinstance(row, ParkedInstance) else "flag",
        instance_id=row.instance_id,
        tenant=row.tenant,
        workflow_name=row.workflow_name,
        business_key=row.business_key,
        status=row.status,
        reason_code=row.reason_code,
        reason=row.reason if isinstance(row, ParkedInstance) else row.evidence,
        since=row.since,
        detected_by=None if isinstance(row, ParkedInstance) else row.detected_by,
        effects_in_doubt=tuple(_effect_line(e) for e in effects if e.state == "UNKNOWN"),
        failed_compensations=tuple(
            _effect_line(e) for e in effects if e.compensates is not None and e.state == "FAILED"
        ),
    )


def attention(store: OperatorStore, query: AttentionQuery | None = None) -> list[AttentionItem]:
    """Parked instances and open flags, oldest first, at most ``query.limit`` (no query: the
    whole queue, up to the default bound)."""
    query = query or AttentionQuery()
    bounded = dataclasses.replace(query, limit=max(1, min(query.limit, limits.ATTENTION_LIMIT_MAX)))
    parked, flagged = store.attention_rows(bounded)
    rows: list[ParkedInstance | FlaggedInstance] = [*parked, *flagged]
    rows.sort(key=lambda row: (row.since, row.instance_id))
    return [_item(row, store) for row in rows[: bounded.limit]]
