"""A child's ending as the event that carries it to its parent's inbox (internal).

One shape, whoever writes the ending: the child's worker (its ending commit carries it, see
:mod:`ledgerflow.runtime.child_endings`) or the store itself when it ends an instance outside
any worker (a crash loop parked at a claim, an operator's repair). The event id names the
child, the status and the generation, so one ending is kept once however often its
transaction is tried, and a child an operator resumed that ends again is kept again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.ledger.transaction import Deliver
from ledgerflow.model.ids import Generation
from ledgerflow.model.instance import InstanceStatus

CHILD_EVENT_PREFIX = "child:"


def child_event_name(child_id: str) -> str:
    """The inbox name under which a child's endings reach its parent."""
    return f"{CHILD_EVENT_PREFIX}{child_id}"


def child_ending(
    child: InstanceRecord,
    *,
    status: InstanceStatus,
    generation: Generation,
    reason_code: str | None,
    cause: str | None,
    result: str | None,
    residual: Sequence[str] = (),
) -> Deliver:
    """The event for ``child``'s parent (the child must have one): its ending's status, why,
    the effects that stay (``participant.operation``) and its result as its codec wrote it."""
    assert child.parent_instance_id is not None, "only a child's ending goes to a parent"
    outcome = {
        "child_id": child.instance_id,
        "status": status.value,
        "reason_code": reason_code,
        "cause": cause,
        "generation": generation,
        "residual": list(residual),
        "result_text": result,
    }
    return Deliver(
        instance_id=child.parent_instance_id,
        event_id=f"child-end:{child.instance_id}:{status.value}:{generation}",
        name=child_event_name(child.instance_id),
        payload=json.dumps(outcome),
        sender=child_event_name(child.instance_id),
        for_seq=child.parent_seq,
        run=child.parent_run,
        # Bounded by the parent's open children (limits.CHILDREN_OPEN_MAX), not by the inbox:
        # a full inbox must never keep a child from ending.
        bounded=False,
    )
