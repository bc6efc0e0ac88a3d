"""The log lines an on-call engineer works from, written as the journal records them (internal).

Each failure, retry, UNKNOWN outcome, park and unhappy ending is logged once: when the commit
that records it became durable (:func:`committed`, called by the session), so a line is never
written for something the journal did not keep, nor twice for one transition. Takeovers,
flags and repairs are logged where they happen, with :func:`identity`.

Every line carries the identities it is about as record attributes (``extra``), named by
:data:`IDENTITY_FIELDS`; the command line's formatters write them as fields. Payloads (inputs,
outputs, evidence) are never logged: a line names the step, the effect and the error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ledgerflow.ledger.records import (
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    StepWrite,
    Write,
)
from ledgerflow.model.effect import EffectEvent, EffectState
from ledgerflow.model.instance import InstanceEvent, InstanceStatus
from ledgerflow.model.step import StepEvent, StepKind

log = logging.getLogger("ledgerflow.journal")

# The identity fields a log line may carry, in the order a reader wants them.
IDENTITY_FIELDS = (
    "tenant",
    "workflow",
    "version",
    "instance",
    "run",
    "step",
    "effect",
    "key",
    "worker",
    "generation",
)
# Endings worth a warning: the instance did not do what it was started for.
_UNHAPPY = {
    InstanceStatus.FAILED,
    InstanceStatus.COMPENSATED,
    InstanceStatus.CANCELLED,
    InstanceStatus.FORWARD_RECOVERY_REQUIRED,
}


def identity(instance: InstanceRecord, **more: Any) -> dict[str, Any]:
    """The ``extra`` of a line about ``instance`` (and ``more``: step, effect, key, worker)."""
    fields: dict[str, Any] = {
        "tenant": instance.tenant,
        "workflow": instance.workflow_name,
        "version": instance.workflow_version,
        "instance": instance.instance_id,
        "run": instance.run,
        "generation": instance.generation,
    }
    fields.update((k, v) for k, v in more.items() if v is not None)
    return fields


def committed(instance: InstanceRecord, owner: str, writes: Sequence[Write]) -> None:
    """Log what a durable commit of ``owner`` on ``instance`` recorded that a person must see."""
    for write in writes:
        if isinstance(write, StepWrite):
            _step(instance, owner, write)
        elif isinstance(write, EffectWrite):
            _effect(instance, owner, write)
        elif isinstance(write, InstanceWrite):
            _instance(instance, owner, write)


def _error(text: str | None) -> str:
    """A journaled error (``{"type", "message"}``) as one line."""
    if not text:
        return "no error recorded"
    try:
        error = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(error, dict):
        return f"{error.get('type', 'Error')}: {error.get('message', '')}"[:500]
    return str(error)[:500]


def _step(instance: InstanceRecord, owner: str, write: StepWrite) -> None:
    # An effect's step fails with its effect, which says why: logged once, there.
    if write.record.kind is not StepKind.LOCAL:
        return
    r = write.record
    if write.event is StepEvent.SCHEDULE_RETRY:
        level, what = logging.WARNING, f"will retry (attempt {r.attempt} next)"
    elif write.event is StepEvent.FAIL:
        level, what = logging.ERROR, f"failed after {r.attempt} attempt(s)"
    else:
        return
    log.log(
        level,
        "step %s (%s) %s: %s",
        r.seq,
        r.name,
        what,
        _error(r.error),
        extra=identity(instance, step=r.seq, worker=owner),
    )


def _effect(instance: InstanceRecord, owner: str, write: EffectWrite) -> None:
    r = write.record
    event, before = write.event, write.expected
    if event is EffectEvent.LOSE_OUTCOME and before is not EffectState.UNKNOWN:
        level, what = logging.WARNING, f"outcome UNKNOWN: {r.reason}"
    elif event is EffectEvent.REJECT_FINAL:
        level, what = logging.ERROR, f"failed: {r.reason}"
    elif event is EffectEvent.REDISPATCH:
        level, what = logging.WARNING, f"will be sent again (attempt {r.attempt}): {write.detail}"
    elif event is EffectEvent.CONFIRM and before is EffectState.UNKNOWN:
        level, what = logging.INFO, f"UNKNOWN outcome settled: {write.detail}"
    else:
        return
    kind = "compensation" if r.compensates else "effect"
    log.log(
        level,
        "%s %s.%s (step %s) %s",
        kind,
        r.participant,
        r.operation,
        abs(r.seq),
        what,
        extra=identity(
            instance, step=r.seq, effect=r.effect_id, key=r.idempotency_key, worker=owner
        ),
    )


def _instance(instance: InstanceRecord, owner: str, write: InstanceWrite) -> None:
    fields = identity(instance, worker=owner)
    if write.event is InstanceEvent.PARK:
        log.error(
            "instance parked for a person (%s): %s", write.reason_code, write.reason, extra=fields
        )
    elif write.status in _UNHAPPY:
        log.warning(
            "instance ended %s (%s): %s",
            write.status.value,
            write.reason_code,
            write.reason,
            extra=fields,
        )
    elif write.status is InstanceStatus.SUCCEEDED:
        log.debug("instance succeeded", extra=fields)
