"""What a principal below the operator role is not shown: a workflow defect's exception and
traceback (internal).

A defect parks its instance with the exception's text and its traceback in the instance's
reason (and its cause, which later endings keep), and a failed local step keeps its traceback
beside its error (and the step, when its failure was the defect, the exception's message).
They can hold whatever the code was handling when it broke (a key, an address, a value read
from the environment): a matter for the people who fix and repair it, not for every viewer or
signaller of the tenant. So through the HTTP API and the console a principal below
``operator`` sees each of those texts replaced by :data:`WITHHELD`; the reason code, the
exception's type and the other facts stay. Operators and admins see
everything, and so does the command line, which acts with the database's credentials.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from ledgerflow.ledger.records import InstanceRecord, StepRecord
from ledgerflow.model.authority import ApiRole
from ledgerflow.model.defects import DEFECT_RETRY, WORKFLOW_DEFECT, step_verdict
from ledgerflow.operators.attention import AttentionItem
from ledgerflow.operators.paging import InstanceOverview
from ledgerflow.runtime.engine import InstanceDetail

__all__ = ["WITHHELD", "attention_seen", "detail_seen", "instance_seen", "shows_defects"]

WITHHELD = (
    "(withheld: a workflow defect's exception and traceback are shown to operators and above)"
)
# What :func:`detail_seen` is given: an instance with its steps (the whole detail, or its page).
_Shown = TypeVar("_Shown", InstanceDetail, InstanceOverview)
# The reason codes whose reason holds a defect's exception (and, once parked, its traceback).
DEFECT_CODES = (WORKFLOW_DEFECT, DEFECT_RETRY)


def shows_defects(role: ApiRole) -> bool:
    """Whether ``role`` sees defects' exceptions and tracebacks."""
    return role.allows(ApiRole.OPERATOR)


def _defect_text(code: str | None, text: str | None) -> bool:
    return text is not None and (
        code in DEFECT_CODES or text.startswith(tuple(f"{c}:" for c in DEFECT_CODES))
    )


def instance_seen(record: InstanceRecord, role: ApiRole) -> InstanceRecord:
    """The instance as ``role`` may see it."""
    if shows_defects(role):
        return record
    reason = WITHHELD if _defect_text(record.reason_code, record.reason) else record.reason
    # A cause is "code: reason" (InstanceRecord.cause), kept by every later ending.
    cause = WITHHELD if _defect_text(None, record.cause) else record.cause
    if (reason, cause) == (record.reason, record.cause):
        return record
    return dataclasses.replace(record, reason=reason, cause=cause)


def _step_seen(step: StepRecord) -> StepRecord:
    """Every traceback is withheld; so are the messages of a step whose failure was a defect
    (its journaled verdict), which are the exception the instance was parked with."""
    error, attempts = step.error, step.attempt_errors
    decoded = _loaded(step.error)
    if isinstance(decoded, dict) and "message" in decoded and not step_verdict(decoded):
        error = _encoded({**decoded, "message": WITHHELD})
        entries = _loaded(step.attempt_errors)
        if isinstance(entries, list):
            attempts = _encoded(
                [{**e, "message": WITHHELD} if isinstance(e, dict) else e for e in entries]
            )
    traceback = WITHHELD if step.error_traceback is not None else None
    if (error, attempts, traceback) == (step.error, step.attempt_errors, step.error_traceback):
        return step
    return dataclasses.replace(
        step, error=error, attempt_errors=attempts, error_traceback=traceback
    )


def _loaded(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _encoded(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def detail_seen(detail: _Shown, role: ApiRole) -> _Shown:
    """An instance with its ledgers (its detail, or its page) as ``role`` may see them."""
    if shows_defects(role):
        return detail
    return dataclasses.replace(
        detail,
        instance=instance_seen(detail.instance, role),
        steps=[_step_seen(s) for s in detail.steps],
    )


def attention_seen(item: AttentionItem, role: ApiRole) -> AttentionItem:
    """An attention item as ``role`` may see it (a parked instance's reason)."""
    if shows_defects(role) or not _defect_text(item.reason_code, item.reason):
        return item
    return dataclasses.replace(item, reason=WITHHELD)
