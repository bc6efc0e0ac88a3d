"""A parent's saga undoing a child that SUCCEEDED, by the compensating workflow the child was
started with (``ctx.child(..., compensate_with=...)``) (internal).

Such a child is an obligation of its parent at the child's own position, as a compensatable
effect is at its step's: when the parent compensates (a business failure, a cancel asking
to undo), it is undone in reverse position order among the effects. The obligations are read
from the journal -- the child's CHILD step COMPLETED with a SUCCEEDED outcome and a
``compensate_with`` in its input -- so a resume finds the same ones; a child that ended any
other way had its own saga and is no obligation.

Undoing one is a child of the parent at the negative of the child's position: its CHILD step
and its instance are one commit, under a key derived from the child's key, so a crash or a
replay never starts it twice; the parent lets go of its lease until its ending arrives (the
inbox wakes it) and takes it in the commit that closes the step. A compensating workflow that
does not succeed parks the parent for a person (MANUAL_INTERVENTION, ``compensation_failed``),
never COMPENSATED.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import RegistrationError
from ledgerflow.ledger.children import child_event_name
from ledgerflow.ledger.records import ConsumeDelivery, NewInstance, StartInstance, StepRecord
from ledgerflow.ledger.transitions import new_step, step_change
from ledgerflow.model import names
from ledgerflow.model.definition import Registry
from ledgerflow.model.ids import BusinessKey, InstanceId, RunNumber, StepSeq
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.step import StepEvent, StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.control import Park, Suspend
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.session import Session

COMPENSATING_SUFFIX = "/compensate"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildObligation:
    """A child that SUCCEEDED with a compensating workflow: what undoing it needs."""

    position: StepSeq  # the child's place in the parent's whole history
    child_id: InstanceId
    child_key: BusinessKey
    workflow: str  # the compensating workflow
    input: Any  # what the compensating workflow receives

    @property
    def key(self) -> BusinessKey:
        """The compensating instance's key, derived from the child's identity."""
        return compensating_key(self.child_key, self.child_id)


def compensating_key(child_key: str, child_id: str) -> BusinessKey:
    """The child's key (its id when the key is too long for the suffix) + ``/compensate``."""
    fits = len(child_key) + len(COMPENSATING_SUFFIX) <= limits.BUSINESS_KEY_LENGTH_MAX
    return names.business_key((child_key if fits else child_id) + COMPENSATING_SUFFIX)


def obligations(
    session: Session, steps: Iterable[tuple[StepSeq, StepRecord]]
) -> list[ChildObligation]:
    """The children among ``steps`` (each with its place in the whole history) that a
    compensation undoes: SUCCEEDED, started with ``compensate_with``."""
    found = []
    for position, step in steps:
        if step.kind is not StepKind.CHILD or step.seq <= 0:
            continue
        if step.status is not StepStatus.COMPLETED:
            continue
        spec = session.codec.decode(step.input or "{}")
        outcome = session.codec.decode(step.output or "{}")
        if not spec.get("compensate_with") or not _succeeded(outcome):
            continue
        given = spec.get("compensation_input")
        found.append(
            ChildObligation(
                position=position,
                child_id=spec["child_id"],
                child_key=spec["key"],
                workflow=spec["compensate_with"],
                input=given
                if given is not None
                else {"input": spec.get("input"), "result": outcome.get("result")},
            )
        )
    return found


def _succeeded(outcome: dict[str, Any]) -> bool:
    """Only a child that SUCCEEDED is undone here: any other ending was its own saga's."""
    return outcome.get("status") == "SUCCEEDED"


async def undo(session: Session, registry: Registry, item: ChildObligation, seq: StepSeq) -> str:
    """Run the compensating workflow of ``item`` at the parent's position ``seq`` to its
    SUCCEEDED ending (the summary line of it), or park the parent."""
    recorded = session.step(seq)
    if recorded is None:
        recorded = await _start(session, registry, item, seq)
    if recorded.status is not StepStatus.COMPLETED:
        recorded = await _take(session, item, recorded)
    outcome = session.codec.decode(recorded.output or "{}")
    child_id = instance_id_for(session.instance.tenant, item.workflow, item.key)
    if outcome.get("status") != "SUCCEEDED":
        raise Park(
            "compensation_failed",
            f"compensating workflow {item.workflow} ({child_id}) for child {item.child_id} "
            f"ended {outcome.get('status')}: {outcome.get('cause') or outcome.get('reason_code')}",
        )
    return f"child {item.child_id} by {item.workflow} ({child_id}): SUCCEEDED"


async def _start(
    session: Session, registry: Registry, item: ChildObligation, seq: StepSeq
) -> StepRecord:
    try:
        definition = registry.get(item.workflow)
    except RegistrationError:
        raise Park(
            "compensation_not_declared",
            f"this worker does not know the compensating workflow {item.workflow!r}",
        ) from None
    parent = session.instance
    child_id = instance_id_for(parent.tenant, definition.name, item.key)
    new = NewInstance(
        instance_id=child_id,
        tenant=parent.tenant,
        workflow_name=definition.name,
        workflow_version=definition.version,
        fingerprint=definition.fingerprint,
        business_key=item.key,
        input=session.codec.encode(item.input),
        parent_instance_id=parent.instance_id,
        parent_run=RunNumber(parent.run),
        parent_seq=seq,
        # A compensation is seen through whatever becomes of the parent meanwhile.
        on_parent_end="abandon",
    )
    spec = {
        "workflow": definition.name,
        "key": item.key,
        "child_id": child_id,
        "input": item.input,
        "compensates": item.child_id,
        "on_parent_end": "abandon",
    }
    step = new_step(
        parent,
        seq,
        StepEvent.START,
        kind=StepKind.CHILD,
        name=f"compensate child:{definition.name}",
        input=session.codec.encode(spec),
        retry_policy=session.codec.encode(DEFAULT_STEP_RETRY.to_record()),
        now=session.clock.now(),
        detail=f"child {child_id} compensates {item.child_id}",
    )
    if faults.plan is not None:
        faults.point("child.before_compensate", instance=parent.business_key, seq=seq)
    # No NoCancelRequest here: a cancel asking to undo is what may have brought us here.
    await session.commit(step, StartInstance(new=new))
    if faults.plan is not None:
        faults.point("child.after_compensate", instance=parent.business_key, seq=seq)
    started = session.step(seq)
    assert started is not None, "the commit journals the step"
    return started


async def _take(session: Session, item: ChildObligation, recorded: StepRecord) -> StepRecord:
    """The compensating child's ending from the inbox, closing its step; or the lease given
    back until it arrives (an arrival before the release makes the instance due at once)."""
    spec = session.codec.decode(recorded.input or "{}")
    name = child_event_name(spec["child_id"])
    for delivery in await session.store.pending_deliveries(session.instance_id, name):
        outcome: dict[str, Any] = json.loads(delivery.payload)
        result_text = outcome.pop("result_text", None)
        outcome["result"] = None if result_text is None else session.codec.decode(result_text)
        if faults.plan is not None:
            faults.point(
                "child.before_compensate_take",
                instance=session.instance.business_key,
                seq=recorded.seq,
            )
        await session.commit(
            ConsumeDelivery(event_id=delivery.event_id, seq=recorded.seq),
            step_change(
                recorded,
                StepEvent.COMPLETE,
                now=session.clock.now(),
                generation=session.generation,
                output=session.codec.encode(outcome),
                next_attempt_at=None,
                detail=f"child {outcome.get('child_id')} {outcome['status']}",
            ),
        )
        taken = session.step(recorded.seq)
        assert taken is not None
        return taken
    raise Suspend(available_at=limits.WAIT_FOREVER_AT)
