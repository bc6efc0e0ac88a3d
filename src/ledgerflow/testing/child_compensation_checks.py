"""The oracle's check of compensating children (``ctx.child(..., compensate_with=...)``):
a compensating workflow undoes only a child that SUCCEEDED and declared one, once; and a
parent that ended COMPENSATED had every such child undone."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ledgerflow.ledger.records import InstanceRecord, StepRecord
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.testing.violations import Violation

SUFFIX = "/compensate"


def compensated_child_once(
    instances: Sequence[InstanceRecord], steps: Mapping[InstanceId, Sequence[StepRecord]]
) -> Iterable[Violation]:
    """I8b: every compensating instance (a child at a negative position) undoes a child of the
    same parent that SUCCEEDED with ``compensate_with``, and is that child's only one; a
    COMPENSATED parent has a SUCCEEDED compensating instance for each such child."""
    for parent in instances:
        owed: set[str] = set()
        for step in steps.get(parent.instance_id, []):
            if step.kind is not StepKind.CHILD or step.seq <= 0:
                continue
            spec = json.loads(step.input or "{}")
            outcome = json.loads(step.output or "{}")
            succeeded = step.status is StepStatus.COMPLETED and outcome.get("status") == "SUCCEEDED"
            if spec.get("compensate_with") and succeeded:
                owed.add(spec["key"])
        undoing = [
            i
            for i in instances
            if i.parent_instance_id == parent.instance_id and (i.parent_seq or 0) < 0
        ]
        counts = Counter(i.business_key.removesuffix(SUFFIX) for i in undoing)
        for key, n in counts.items():
            if key not in owed:
                yield Violation(
                    "compensated-child-once",
                    parent.instance_id,
                    f"a compensating workflow undoes {key}, which did not succeed with one",
                )
            elif n > 1:
                yield Violation(
                    "compensated-child-once", parent.instance_id, f"{key} was undone {n} times"
                )
        if parent.status is InstanceStatus.COMPENSATED:
            done = {
                i.business_key.removesuffix(SUFFIX)
                for i in undoing
                if i.status is InstanceStatus.SUCCEEDED
            }
            for key in sorted(owed - done):
                yield Violation(
                    "compensated-child-once",
                    parent.instance_id,
                    f"ended COMPENSATED, but its child {key} was not undone",
                )
