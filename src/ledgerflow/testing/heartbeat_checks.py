"""The oracle's checks of effect heartbeats and attempt counting (internal: the oracle's
``check`` runs them on its snapshot, through :mod:`~ledgerflow.testing.capability_checks`).

From the store's own rows, for every effect:

- ``heartbeat-after-outcome``: no heartbeat is durable after the effect left its last attempt
  (a zombie's heartbeat landing once the outcome was recorded, or once a missed heartbeat made
  it UNKNOWN, would be a write the fence on (effect, attempt, generation) should have refused);
  and none names an attempt or a generation the effect or the instance never reached.
- ``dispatch-uncounted``: every intent is an attempt: the effect entered INTENDED (the intent
  of a dispatch) exactly as many times as its attempt number says, and never more often than
  its step's retry policy allows. A step cut off (by a missed heartbeat, a crash, a deadline)
  and sent again without counting would re-run for ever without using its budget.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping

from ledgerflow.ledger.records import EffectRecord, InstanceRecord, StepRecord, TimelineEntry
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId
from ledgerflow.testing.violations import Violation

HEARTBEAT_AFTER_OUTCOME = "heartbeat-after-outcome"
DISPATCH_UNCOUNTED = "dispatch-uncounted"


def heartbeats_and_attempts(
    instances: Iterable[InstanceRecord],
    effects: Mapping[InstanceId, list[EffectRecord]],
    events: Mapping[InstanceId, list[TimelineEntry]],
    steps: Mapping[InstanceId, list[StepRecord]],
) -> Iterable[Violation]:
    for instance in instances:
        iid = instance.instance_id
        timeline = events.get(iid, [])
        budgets = _budgets(steps.get(iid, []))
        mine = effects.get(iid, [])
        # The timeline names an effect by its position only: a position two runs share
        # (continue-as-new) cannot be told apart there, so it is not checked.
        shared = {seq for seq, n in Counter(e.seq for e in mine).items() if n > 1}
        for effect in mine:
            if effect.seq in shared:
                continue
            moves = [e for e in timeline if e.subject == f"effect:{effect.seq}"]
            yield from _heartbeat(instance, effect, moves)
            yield from _counted(effect, moves, budgets.get((effect.run, effect.seq)))


def _heartbeat(
    instance: InstanceRecord, effect: EffectRecord, moves: list[TimelineEntry]
) -> Iterable[Violation]:
    if effect.heartbeat_at is None:
        return
    iid = instance.instance_id
    if effect.heartbeat_attempt > effect.attempt or effect.heartbeat_generation > (
        instance.generation
    ):
        yield Violation(
            HEARTBEAT_AFTER_OUTCOME,
            iid,
            f"effect {effect.seq}: a heartbeat of attempt {effect.heartbeat_attempt} "
            f"(generation {effect.heartbeat_generation}) beyond the effect's attempt "
            f"{effect.attempt} or the instance's generation {instance.generation}",
        )
    if effect.state is EffectState.INTENDED and effect.heartbeat_attempt == effect.attempt:
        return
    left = [e.at for e in moves if e.from_state == EffectState.INTENDED.value]
    if left and effect.heartbeat_at > max(left):
        yield Violation(
            HEARTBEAT_AFTER_OUTCOME,
            iid,
            f"effect {effect.seq}: a heartbeat of attempt {effect.heartbeat_attempt} at "
            f"{effect.heartbeat_at:.3f}, after its last attempt ended at {max(left):.3f} "
            f"({effect.state.value})",
        )


def _counted(
    effect: EffectRecord, moves: list[TimelineEntry], budget: int | None
) -> Iterable[Violation]:
    intents = sum(1 for e in moves if e.to_state == EffectState.INTENDED.value)
    if intents > effect.attempt:
        yield Violation(
            DISPATCH_UNCOUNTED,
            effect.instance_id,
            f"effect {effect.seq}: {intents} intents, but attempt {effect.attempt}: a "
            "re-dispatch did not count as an attempt",
        )
    if budget is not None and effect.attempt > budget:
        yield Violation(
            DISPATCH_UNCOUNTED,
            effect.instance_id,
            f"effect {effect.seq}: attempt {effect.attempt} past the policy's {budget}",
        )


def _budgets(steps: Iterable[StepRecord]) -> dict[tuple[int, int], int]:
    """Each step's attempts_max, from the retry policy journaled with it."""
    budgets: dict[tuple[int, int], int] = {}
    for step in steps:
        try:
            policy = json.loads(step.retry_policy or "{}")
        except ValueError:
            continue
        if isinstance(policy, dict) and isinstance(policy.get("attempts_max"), int):
            budgets[(step.run, step.seq)] = policy["attempts_max"]
    return budgets
