"""The oracle's checks of runs (continue-as-new), from the store's own rows (internal: the
oracle's ``check`` runs them).

One open run per instance, and an inbox carried whole across each switch: what a run closing
leaves behind, no later run would ever take.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import (
    Delivery,
    EffectRecord,
    InstanceRecord,
    RunRecord,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.ledger.values import TAKE_PREFIX
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.signal import UPDATE_PREFIX
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.testing.violations import Violation


class Snapshot(Protocol):
    """What these checks read of the oracle's snapshot (``oracle.Snapshot``)."""

    @property
    def instances(self) -> list[InstanceRecord]: ...
    @property
    def effects(self) -> dict[InstanceId, list[EffectRecord]]: ...
    @property
    def events(self) -> dict[InstanceId, list[TimelineEntry]]: ...
    @property
    def inbox(self) -> dict[InstanceId, list[Delivery]]: ...
    @property
    def steps(self) -> dict[InstanceId, list[StepRecord]]: ...
    @property
    def runs(self) -> dict[InstanceId, list[RunRecord]]: ...


def one_open_run(snapshot: Snapshot) -> Iterable[Violation]:
    """I8: one open run per instance. Its closed runs are exactly 1 .. run-1, each closed by
    one switch on the timeline; nothing is journaled past the open run; and nothing of a closed
    run is still open (a step started or waiting, an effect not settled)."""
    for instance in snapshot.instances:
        iid = instance.instance_id
        closed = [r.run for r in snapshot.runs.get(iid, [])]
        # A run that ended for good before a start opened the next (if_ended) keeps what its
        # ending left (a wait a cancel stopped, events refused as ended): it is history.
        ended = {r.run for r in snapshot.runs.get(iid, []) if r.ended is not None}
        if closed != list(range(1, instance.run)):
            yield Violation("one-open-run", iid, f"on run {instance.run} with closed runs {closed}")
        switches = [(e.from_state, e.to_state) for e in snapshot.events[iid] if e.subject == "run"]
        if switches != [(str(r), str(r + 1)) for r in range(1, instance.run)]:
            yield Violation("one-open-run", iid, f"on run {instance.run} after switches {switches}")
        for step in snapshot.steps.get(iid, []):
            if (
                step.run < instance.run
                and step.run not in ended
                and step.status not in _CLOSED_STEPS
            ):
                yield Violation(
                    "one-open-run",
                    iid,
                    f"step {step.seq} of closed run {step.run} is {step.status.value}",
                )
        for effect in snapshot.effects[iid]:
            if effect.run > instance.run:
                yield Violation("one-open-run", iid, f"effect {effect.effect_id} past the open run")
            elif effect.run < instance.run and effect.state in _UNSETTLED_EFFECTS:
                yield Violation(
                    "one-open-run",
                    iid,
                    f"effect {effect.effect_id} of closed run {effect.run} is {effect.state.value}",
                )


_CLOSED_STEPS = frozenset({StepStatus.COMPLETED, StepStatus.FAILED})
_UNSETTLED_EFFECTS = frozenset(
    {EffectState.PLANNED, EffectState.INTENDED, EffectState.ACCEPTED, EffectState.UNKNOWN}
)


def no_event_lost_or_duplicated_across_a_switch(snapshot: Snapshot) -> Iterable[Violation]:
    """Continue-as-new carries the inbox: every event no wait took is filed under the open
    run (one left on a closed run is lost: no wait of it will ever run again), each consumed
    event was taken by the wait of its run at its position and that wait names it, and no
    event reached the workflow's waits twice, in one run or across runs (an effect's callback
    is taken by its effect's step, a child's ending by its child step: they name no wait)."""
    for instance in snapshot.instances:
        iid = instance.instance_id
        ended = {r.run for r in snapshot.runs.get(iid, []) if r.ended is not None}
        steps: dict[tuple[int, int], StepRecord] = {
            (s.run, s.seq): s for s in snapshot.steps.get(iid, [])
        }
        waits = {
            at: s
            for at, s in steps.items()
            # A durable lock's acquiring takes its grant as a wait takes its event, and an
            # update taken under a wait (runtime/update_handlers.py) its request.
            if (s.kind in (StepKind.WAIT, StepKind.LOCK) or is_take(s))
            and s.status is StepStatus.COMPLETED
        }
        taken = Counter(taken_event(s) for s in waits.values())
        for event_id, n in taken.items():
            if event_id is not None and n > 1:
                yield Violation(
                    "no-event-duplicated-across-a-switch",
                    iid,
                    f"event {event_id} reached {n} waits",
                )
        for delivery in snapshot.inbox.get(iid, []):
            left = delivery.state is DeliveryState.PENDING or (
                delivery.state is DeliveryState.REJECTED and delivery.refusal == "ended"
            )
            if left and delivery.run != instance.run and delivery.run not in ended:
                yield Violation(
                    "no-event-lost-across-a-switch",
                    iid,
                    f"event {delivery.event_id} ({delivery.name}) was left on run "
                    f"{delivery.run}; the instance went on to run {instance.run}",
                )
            if delivery.state is not DeliveryState.CONSUMED:
                continue
            at = (delivery.run, delivery.consumed_seq or 0)
            if at in steps and steps[at].kind in (StepKind.EFFECT, StepKind.CHILD):
                continue  # a callback or a child's ending: its own step took it, not a wait
            wait = waits.get(at)
            if wait is None or taken_event(wait) != delivery.event_id:
                yield Violation(
                    "no-event-lost-across-a-switch",
                    iid,
                    f"event {delivery.event_id} is consumed by step {delivery.consumed_seq} "
                    f"of run {delivery.run}, which holds no wait that took it",
                )


def is_take(step: StepRecord) -> bool:
    """Whether the step is an update request taken under a wait (a ``take:`` marker)."""
    return step.kind is StepKind.MARKER and step.name.startswith(TAKE_PREFIX + UPDATE_PREFIX)


def taken_event(step: StepRecord) -> str | None:
    """The event id a completed wait journaled as the one it took."""
    output = json.loads(step.output or "null")
    return output.get("event_id") if isinstance(output, dict) else None
