"""Starts under the explorer's faults: a caller that dies around its start's commit and retries.

A scenario may ask for its starts to be swept (:attr:`Scenario.sweep_starts`): each start is
then made with the plan installed, so its points (``start.before_commit``, ``start.after_commit``)
are numbered hits like the workers'. A crash there is the caller's: it never saw an answer, and
— as a caller with a business key should — it asks again with the same key, options and event
id until it is answered. The starts may carry options (a delay, conflict policies, a debounce)
and an event delivered with the start (``signal_with_start``); a debounced spec's caller then
makes the key's further starts (:attr:`StartSpec.then`), each retried the same way, so a crash
lands before and after every debounce transaction.

What must hold whatever the caller lived through (:meth:`StartCallers.judge`):

- ``start-created-once``: the key's instance was created by one commit (one creation entry on
  its timeline), and the caller's final answer says ``created`` exactly when no earlier attempt
  of its committed (a retry never claims to have created it again, nor to have found what it
  made);
- ``signal-with-start-once``: the event sent with the start is in the inbox once;
- ``no-step-before-its-time``: a delayed (or debounced) instance ran nothing before its time;
- ``debounce-ran-stale-input``: every further start of a debounced spec was debounced into the
  key's instance (none refused, none making another), and the instance holds the last input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgerflow.ledger.records import TimelineEntry
from ledgerflow.model.codec import JSON
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey, InstanceId
from ledgerflow.runtime import faults
from ledgerflow.runtime.core import Started, instance_id_for
from ledgerflow.runtime.engine import Engine
from ledgerflow.runtime.faults import SimulatedCrash
from ledgerflow.storage.store import Store
from ledgerflow.testing.debounce_checks import STALE_INPUT
from ledgerflow.testing.plans import Hit
from ledgerflow.testing.violations import Violation

CREATED_ONCE = "start-created-once"
SIGNAL_ONCE = "signal-with-start-once"
NOT_BEFORE_ITS_TIME = "no-step-before-its-time"
# A caller gives up after this many deaths: a plan crashes at a few chosen hits only.
ATTEMPTS_MAX = 10
AFTER_COMMIT = "start.after_commit"


@dataclass(frozen=True, slots=True)
class StartSpec:
    """How a swept scenario starts its instances: ``options`` for ``Engine.start``
    (``start_in``, ``if_running``, ``debounce_seconds``, ...); with ``signal``, by
    ``Engine.signal_with_start`` with that event (``payload``, ``sender``; ``wake`` ends a
    delay). ``then``: the inputs of further starts of each key, made after its first (a
    debounced spec's burst)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    then: tuple[Any, ...] = ()
    signal: str | None = None
    payload: Any = None
    sender: str | None = None
    wake: bool = False


@dataclass(slots=True)
class _Caller:
    key: str
    workflow: str
    at: float  # the clock when it called (a sweep's starts happen before time moves)
    deaths: list[str] = field(default_factory=list)  # the point of each crash it met
    created: bool | None = None
    first_deaths: list[str] = field(default_factory=list)  # those before its first answer
    debounced: list[bool] = field(default_factory=list)  # the answers to its further starts
    last: Any = None  # the input of its last start


class StartCallers:
    """The callers of one run's starts: how each start went, and the judge of all of them."""

    def __init__(self, spec: StartSpec) -> None:
        self.spec = spec
        self.callers: list[_Caller] = []

    async def start(self, engine: Engine, workflow: str, key: str, value: Any) -> None:
        """Start ``key`` as its caller would: asked again, the same way, after every death."""
        caller = _Caller(key, workflow, at=engine.clock.now(), last=value)
        self.callers.append(caller)
        caller.created = (await self._retried(engine, caller, value)).created
        caller.first_deaths = list(caller.deaths)
        for later in self.spec.then:
            caller.last = later
            caller.debounced.append((await self._retried(engine, caller, later)).debounced)

    async def _retried(self, engine: Engine, caller: _Caller, value: Any) -> Started:
        """One start of the caller's, asked again after every death until it is answered."""
        # The explorer's plans keep the hits they crashed at (testing.plans).
        crashed: list[Hit] = getattr(faults.plan, "crashed_at", [])
        for _ in range(ATTEMPTS_MAX):
            seen = len(crashed)
            try:
                return await self._once(engine, caller.workflow, caller.key, value)
            except SimulatedCrash:
                caller.deaths.append(crashed[-1].point if len(crashed) > seen else "?")
        raise RuntimeError(f"the caller of {caller.key} died {ATTEMPTS_MAX} times in a row")

    async def _once(self, engine: Engine, workflow: str, key: str, value: Any) -> Started:
        spec = self.spec
        if spec.signal is None:
            return await engine.start(workflow, key=key, input=value, **spec.options)
        answer = await engine.signal_with_start(
            workflow,
            key=key,
            input=value,
            signal=spec.signal,
            event_id=f"with-start-{key}",
            payload=spec.payload,
            sender=spec.sender,
            wake=spec.wake,
            **spec.options,
        )
        return answer.started

    def judge(self, store: Store) -> list[Violation]:
        """The three promises above, for every start of the run."""
        found: list[Violation] = []
        delay = self.spec.options.get("start_in") or self.spec.options.get("debounce_seconds")
        for caller in self.callers:
            iid = instance_id_for(DEFAULT_TENANT, caller.workflow, BusinessKey(caller.key))
            timeline = store.timeline(iid)
            creations = [e for e in timeline if e.subject == "instance" and e.from_state is None]
            if len(creations) != 1:
                found.append(Violation(CREATED_ONCE, iid, f"created {len(creations)} times"))
            committed_before = AFTER_COMMIT in caller.first_deaths
            if caller.created is committed_before:
                found.append(
                    Violation(
                        CREATED_ONCE,
                        iid,
                        f"answered created={caller.created} after deaths at {caller.deaths}",
                    )
                )
            if self.spec.signal is not None:
                found.extend(_signal_once(store, iid, f"with-start-{caller.key}"))
            if isinstance(delay, int | float) and not self.spec.wake:
                found.extend(_not_before(timeline, iid, caller.at + delay))
            if self.spec.then:
                found.extend(_debounced_all(store, iid, caller))
        return found


def _debounced_all(store: Store, iid: InstanceId, caller: _Caller) -> list[Violation]:
    found = [
        Violation(STALE_INPUT, iid, f"further start {n + 1} was not debounced into the instance")
        for n, debounced in enumerate(caller.debounced)
        if not debounced
    ]
    record = store.get_instance(iid)
    if record is None or JSON.decode(record.input) != caller.last:
        held = None if record is None else record.input
        found.append(
            Violation(STALE_INPUT, iid, f"holds {held}, the last start gave {caller.last!r}")
        )
    return found


def _signal_once(store: Store, iid: InstanceId, event_id: str) -> list[Violation]:
    kept = [d for d in store.inbox(iid) if d.event_id == event_id]
    if len(kept) == 1:
        return []
    return [Violation(SIGNAL_ONCE, iid, f"event {event_id} in the inbox {len(kept)} times")]


def _not_before(timeline: list[TimelineEntry], iid: InstanceId, due: float) -> list[Violation]:
    ran = [e for e in timeline if e.subject.startswith(("step:", "effect:"))]
    ran += [e for e in timeline if e.subject == "instance" and e.to_state == "RUNNING"]
    early = [e for e in ran if e.at < due]
    return [
        Violation(NOT_BEFORE_ITS_TIME, iid, f"{e.subject} -> {e.to_state} at {e.at} < {due}")
        for e in early[:1]
    ]
