"""What arrives for a workflow's waits and asynchronous effects in a simulated run (internal).

A workflow that waits only moves on when something arrives, so an explorer that never sends
what its waits ask for explores nothing past them (and a wait with no timeout never ends).
The waits are discovered at run time, from what the workflow really asks for: an open journal
step of kind ``wait`` named ``wait:<event>`` with input ``{"event", "timeout", "approvers"}``,
and an effect ACCEPTED by a participant that completes it by callback. At every quiet moment
of a run (nothing is due: time is about to move), each such ask not answered yet gets one
choice of the run's plan, among:

- at a wait: each scripted arrival for its event (``Example(events=...)``, ``--arrivals``; by
  default one, with a ``null`` payload), from a sender the wait accepts (the scripted one, or
  the first approver of an approval), and, for an approval, after an event from a sender it
  refuses; and the timeout firing, when the wait has one (nothing is sent, time moves to it);
- at an asynchronous effect: the participant calls back applied, or not applied, or applies it
  and its callback is lost (the deadline passes, and the outcome is settled as UNKNOWN).

The choices are the plan's (see :mod:`ledgerflow.testing.plans`), so every option is
reachable by a scheduled plan and a seed replays its own. What is delivered goes through the
engine's own delivery (approval refusal included), as from another process: no fault point of
the run fires during it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.ledger.records import EffectRecord, InstanceRecord, StepRecord
from ledgerflow.model.effect import EffectState
from ledgerflow.model.examples import Arrival, Events
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.engine import Engine
from ledgerflow.storage.store import JournalStore
from ledgerflow.testing.participants import ScriptedParticipant
from ledgerflow.testing.plans import OutsideEvent, ScheduledPlan

# The name of the signal that arrives where no wait asks for anything: no wait takes it, so
# it must be refused when its instance ends.
PROBE_SIGNAL = "explorer-probe"
PROBE_PAYLOAD = {"probe": True}
# Who sends the event an approval must refuse (never one of its approvers).
REFUSED_SENDER = "explorer-not-an-approver"
TIMEOUT = "timeout"
CALLBACK_APPLIED = "callback: applied"
CALLBACK_NOT_APPLIED = "callback: not applied"
CALLBACK_LOST = "applied, callback lost"
CALLBACK_OPTIONS = (CALLBACK_APPLIED, CALLBACK_NOT_APPLIED, CALLBACK_LOST)
WAITING_READ_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class WaitAsk:
    """An open wait, as its journal step holds it."""

    seq: int
    event: str
    timeout: float | None
    approvers: tuple[str, ...]

    @classmethod
    def of(cls, step: StepRecord) -> WaitAsk | None:
        if step.kind is not StepKind.WAIT or step.status is not StepStatus.STARTED:
            return None
        spec = step.input_value if isinstance(step.input_value, dict) else {}
        event = spec.get("event") or step.name.removeprefix("wait:")
        timeout = spec.get("timeout")
        return cls(
            seq=int(step.seq),
            event=str(event),
            timeout=float(timeout) if isinstance(timeout, int | float) else None,
            approvers=tuple(str(a) for a in spec.get("approvers") or ()),
        )

    def refused_sender(self) -> str:
        name = REFUSED_SENDER
        while name in self.approvers:
            name += "-"
        return name


@dataclass(frozen=True, slots=True)
class Option:
    """One choice at a wait: the events sent, in order (none: the timeout fires)."""

    label: str
    events: tuple[OutsideEvent, ...]


def accepted_event(ask: WaitAsk, arrival: Arrival) -> OutsideEvent:
    """A scripted arrival as sent to ``ask``: by its own sender, or one the wait accepts."""
    sender = arrival.sender
    if sender is None and ask.approvers:
        sender = ask.approvers[0]
    return OutsideEvent(ask.event, arrival.payload, sender)


def wait_options(ask: WaitAsk, events: Events) -> tuple[Option, ...]:
    """What may arrive at this wait, in the order a scheduled plan numbers the options."""
    arrivals = events.get(ask.event) or (Arrival(),)
    refused = (OutsideEvent(ask.event, None, ask.refused_sender()),) if ask.approvers else ()
    options = []
    for n, arrival in enumerate(arrivals, start=1):
        event = accepted_event(ask, arrival)
        by = f" from {event.sender}" if event.sender is not None else ""
        scripted = "scripted" if ask.event in events else "default"
        options.append(Option(f"{ask.event} ({scripted} #{n}){by}", (*refused, event)))
    if ask.timeout is not None:
        options.append(Option(TIMEOUT, refused))
    return tuple(options)


def _event_id(point: str, n: int) -> str:
    text = f"explorer:{point}:{n}"
    if len(text) <= limits.EVENT_ID_LENGTH_MAX:
        return text
    return f"explorer:{hashlib.sha256(point.encode()).hexdigest()[:32]}:{n}"


class ArrivalDriver:
    """The arrivals of one simulated run: chooses, at each quiet moment, what every waiting
    instance's open wait or accepted effect gets, and delivers it.

    ``events`` is each business key's script of arrivals; ``participants`` are the run's
    scripted twins, which answer the callbacks of their asynchronous effects.
    """

    def __init__(
        self, events: Mapping[str, Events], participants: Sequence[ScriptedParticipant]
    ) -> None:
        self.events = events
        self.twins = {p.name: p for p in participants}
        self.decided: set[str] = set()
        self.per_instance: Counter[str] = Counter()
        # The event each wait name asked for (its first option), for arrivals at a hit.
        self.asked: dict[str, OutsideEvent] = {}
        self.delivered = 0
        self.callbacks = 0
        # Events sent with the explorer's default arrival: nothing was scripted for them.
        self.defaulted: set[str] = set()

    async def at_quiet_moment(self, engine: Engine, plan: ScheduledPlan) -> bool:
        """Answer every ask not answered yet; True when something was sent (the run goes on
        at the same instant). Faults are off meanwhile: this is another process."""
        faults.install(None)
        try:
            sent = False
            store = engine.store
            for instance in store.list_instances(
                status=InstanceStatus.WAITING, limit=WAITING_READ_MAX
            ):
                journal = store.journal(instance.instance_id, instance.run)
                for step in journal.steps.values():
                    ask = WaitAsk.of(step)
                    if ask is not None:
                        sent |= await self._wait(engine, plan, instance, ask)
                for effect in journal.effects.values():
                    if effect.state is EffectState.ACCEPTED and effect.seq > 0:
                        sent |= await self._callback(engine, plan, instance, effect)
            return sent
        finally:
            faults.install(plan)

    def _take(self, point: str, key: str) -> bool:
        """Whether ``point`` is still to be decided (once per run, within the bound)."""
        if point in self.decided:
            return False
        if self.per_instance[key] >= limits.EXPLORER_DECISIONS_PER_INSTANCE_MAX:
            return False
        self.decided.add(point)
        self.per_instance[key] += 1
        return True

    async def _wait(
        self, engine: Engine, plan: ScheduledPlan, instance: InstanceRecord, ask: WaitAsk
    ) -> bool:
        key = instance.business_key
        point = f"{key}/r{instance.run}/s{ask.seq} wait:{ask.event}"
        options = wait_options(ask, self.events.get(key, {}))
        self.asked.setdefault(ask.event, options[0].events[-1])
        if not self._take(point, key):
            return False
        chosen = options[plan.choose(point, key, tuple(o.label for o in options))]
        if chosen.label != TIMEOUT and ask.event not in self.events.get(key, {}):
            self.defaulted.add(ask.event)
        for n, event in enumerate(chosen.events):
            await engine.signal(
                instance.instance_id,
                event.name,
                event_id=_event_id(point, n),
                payload=event.payload,
                sender=event.sender,
                for_step=ask.seq,
                run=instance.run,
            )
            self.delivered += 1
        return bool(chosen.events)

    async def _callback(
        self, engine: Engine, plan: ScheduledPlan, instance: InstanceRecord, effect: EffectRecord
    ) -> bool:
        key = instance.business_key
        what = f"{effect.participant}.{effect.operation}"
        point = f"{key}/r{instance.run}/s{effect.seq} callback {what} attempt {effect.attempt}"
        twin = self.twins.get(effect.participant)
        if twin is None or not self._take(point, key):
            return False
        chosen = CALLBACK_OPTIONS[plan.choose(point, key, CALLBACK_OPTIONS)]
        applied, receipt = twin.call_back(
            effect.idempotency_key, apply=chosen != CALLBACK_NOT_APPLIED
        )
        if chosen == CALLBACK_LOST:
            return False
        await engine.complete_effect(
            effect.idempotency_key,
            applied=applied,
            evidence=receipt,
            reason=None if applied else "explorer: the participant did not apply it",
            event_id=_event_id(point, 0),
        )
        self.callbacks += 1
        return True


def event_at_hit(
    store: JournalStore,
    instance: InstanceRecord,
    events: Events,
    *,
    named: str | None,
    planned: OutsideEvent | None,
) -> OutsideEvent:
    """The signal that arrives for ``instance`` at a fault point hit: the one the scenario
    names (with the probe's payload), else the plan's, else what its open wait asks for now,
    else the probe."""
    if named is not None:
        return OutsideEvent(named, PROBE_PAYLOAD)
    if planned is not None:
        return planned
    journal = store.journal(instance.instance_id, instance.run)
    for step in journal.steps.values():
        ask = WaitAsk.of(step)
        if ask is not None:
            return accepted_event(ask, (events.get(ask.event) or (Arrival(),))[0])
    return OutsideEvent(PROBE_SIGNAL, PROBE_PAYLOAD)
