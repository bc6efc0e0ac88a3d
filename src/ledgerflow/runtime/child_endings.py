"""What an instance's ending writes beside itself for its parent and its children (internal).

Written in the ending's own transaction (``Session.commit`` adds these writes to any commit
that ends its instance), so no ending is durable without its consequences:

- a child that reaches a terminal status (SUCCEEDED, FAILED, COMPENSATED, CANCELLED,
  FORWARD_RECOVERY_REQUIRED, MANUAL_INTERVENTION) delivers its outcome to its parent's inbox,
  for the parent's run and position that started it. The event id names the child, status and
  generation, so an ending is kept once however often its commit is tried, and a child resumed
  by an operator and ending again is kept again. A parent that ended first, or whose position
  is closed, keeps the event as refused (with the reason): the outcome is never lost.
- a parent that reaches a final status (SUCCEEDED, FAILED, COMPENSATED, CANCELLED) asks each
  child it started with ``on_parent_end="cancel"`` whose ending it has not taken to cancel
  (a durable cancel request; one that ended already answers it as a no-op). ``abandon``
  children are left running; ``wait`` children ended before the parent's result was recorded.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledgerflow.ledger.children import child_ending
from ledgerflow.ledger.records import InstanceRecord, InstanceWrite, Journal, Write
from ledgerflow.ledger.transaction import Deliver, OutsideWrite, RequestCancel
from ledgerflow.model.codec import Codec
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import FINAL_STATUSES, TERMINAL_STATUSES
from ledgerflow.model.step import StepKind, StepStatus


def ending_writes(
    instance: InstanceRecord,
    journal: Journal,
    codec: Codec,
    cause: str | None,
    writes: Iterable[Write],
) -> tuple[OutsideWrite, ...]:
    """The writes on other instances that an ending among ``writes`` of ``instance`` carries
    (none when the commit ends nothing); ``cause`` is what its session knows led there."""
    ending = next(
        (w for w in writes if isinstance(w, InstanceWrite) and w.status in TERMINAL_STATUSES),
        None,
    )
    if ending is None:
        return ()
    out: list[OutsideWrite] = []
    if instance.parent_instance_id is not None:
        out.append(_to_parent(instance, journal, ending.cause or cause, ending))
    if ending.status in FINAL_STATUSES:
        out.extend(_to_children(instance, journal, codec, ending))
    return tuple(out)


def _to_parent(
    instance: InstanceRecord, journal: Journal, cause: str | None, ending: InstanceWrite
) -> Deliver:
    return child_ending(
        instance,
        status=ending.status,
        generation=instance.generation,
        reason_code=ending.reason_code,
        cause=cause,
        result=ending.result,
        residual=_residual(journal),
    )


def _residual(journal: Journal) -> list[str]:
    """The confirmed effects that stay applied: not undone by a confirmed compensation."""
    effects = journal.effects.values()
    undone = {
        e.compensates
        for e in effects
        if e.compensates is not None and e.state is EffectState.CONFIRMED
    }
    return [
        f"{e.participant}.{e.operation}"
        for e in sorted(effects, key=lambda e: e.seq)
        if e.compensates is None and e.state is EffectState.CONFIRMED and e.effect_id not in undone
    ]


def _to_children(
    instance: InstanceRecord, journal: Journal, codec: Codec, ending: InstanceWrite
) -> list[RequestCancel]:
    asks: list[RequestCancel] = []
    for step in sorted(journal.steps.values(), key=lambda s: s.seq):
        if step.kind is not StepKind.CHILD or step.status is not StepStatus.STARTED:
            continue
        spec = codec.decode(step.input or "{}")
        if not isinstance(spec, dict) or spec.get("on_parent_end", "cancel") != "cancel":
            continue
        asks.append(
            RequestCancel(
                instance_id=InstanceId(spec["child_id"]),
                reason=f"parent {instance.instance_id} ended {ending.status.value}",
            )
        )
    return asks
