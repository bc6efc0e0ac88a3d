"""Scripted participants: in-process services with a script of misbehaviours and their own
record of every application, which is what the oracle believes over the engine's ledger.

A participant applies every delivery it accepts (so without deduplication a repeated key is
applied twice and the record shows it), fences attempts its lookup answered "not applied" for,
and can be told to misbehave for chosen deliveries: reject, time out, lose the reply after
applying, apply late, drift (lose a fact behind the ledger's back), hold a delivery while the
engine's store stalls past its lease, or ignore the engine's cancellation at the deadline and
answer late; and its lookup can be unreachable for a while (an outage). An operation that
completes by callback is only accepted by its dispatch; the simulation then has the participant
call back applied or not applied, or apply it and lose the callback (see :meth:`call_back`).

It also records, for the oracle, what the engine cannot be trusted to report about itself:
two calls for one instance in flight at once (two copies of the instance running), answers it
gave after the caller's deadline, and the lookups it refused in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgerflow.errors import EffectRejectedError
from ledgerflow.model.classification import Classification
from ledgerflow.model.compensation import Precondition
from ledgerflow.model.definition import EffectCall, EffectDeclaration, Participant
from ledgerflow.model.effect import LookupAnswer
from ledgerflow.model.ids import IdempotencyKey
from ledgerflow.model.retry import RetryPolicy
from ledgerflow.testing.clock import FakeClock


class Behavior(enum.Enum):
    SUCCEED = "succeed"
    # Proven not applied; a retry may succeed.
    REJECT = "reject"
    # Proven not applied, and never will be.
    REJECT_FINAL = "reject-final"
    # Not applied, but the caller cannot know: its wait ran out.
    TIMEOUT = "timeout"
    # Applied, then the reply was lost.
    LOSE_REPLY = "lose-reply"
    # Accepted now, applied later (at the next delivery of late work), reply lost.
    LATE = "late"
    # Applied, but the answer is held while the engine's store stalls for longer than the
    # lease (the world's stall hook), then given: the engine may take the instance up again
    # meanwhile, and must not run a second copy of it.
    STALL = "stall"
    # Applied, then the answer is held past the call's deadline; the engine's cancellation is
    # ignored and the answer comes late, marked so: it must never complete the effect.
    STUBBORN = "stubborn"


class LookupBehavior(enum.Enum):
    ANSWER = "answer"
    # The participant cannot be reached: the lookup raises, nothing is asked or fenced.
    UNREACHABLE = "unreachable"


class LostReplyError(ConnectionError):
    """The scripted network lost the participant's answer."""


@dataclass(frozen=True, slots=True)
class Application:
    """One application of one key at a participant, in the world's global order."""

    order: int
    participant: str
    operation: str
    key: str
    attempt: int
    payload: Any


@dataclass(frozen=True, slots=True)
class Overlap:
    """Two calls for one instance were in flight at once: two copies of it ran together."""

    instance_id: str
    first: str
    second: str


Stall = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class World:
    """What all scripted participants of one run share: the global order of applications, and
    what the oracle needs to know that only the participants saw."""

    applications: list[Application] = field(default_factory=list)
    drifted: set[tuple[str, str]] = field(default_factory=set)
    reversed: set[tuple[str, str]] = field(default_factory=set)
    # The run's clock (a stubborn participant lets the caller's deadline pass on it) and its
    # store stall (see Behavior.STALL); set by the simulation.
    clock: FakeClock | None = None
    stall: Stall | None = None
    # Calls in flight per instance (what each is), and every time two overlapped.
    in_flight: dict[str, list[str]] = field(default_factory=dict)
    overlaps: list[Overlap] = field(default_factory=list)
    # Copies of each instance's workflow code running now, and every time two ran at once.
    executions: dict[str, int] = field(default_factory=dict)
    # The fingerprints of the code each instance's workflow function ran on, in order.
    ran_on: dict[str, list[str]] = field(default_factory=dict)
    # (participant, key, attempt) of every answer given after the caller's deadline.
    late_answers: list[tuple[str, str, int]] = field(default_factory=list)
    # Lookups refused in a row per (participant, key), and each participant's lookup policy
    # bound: an instance parked for doubt before that bound was spent parked too early.
    lookup_misses: dict[tuple[str, str], int] = field(default_factory=dict)
    lookup_attempts_max: dict[str, int] = field(default_factory=dict)
    lookups_refused: int = 0
    # The scenario's workflows run effects in parallel branches (asyncio.gather): calls of one
    # instance under different keys may then be in flight at once, and may reach their
    # participants in any order; two calls under one key at once are still two copies.
    branches: bool = False

    def record(
        self, participant: str, operation: str, key: str, attempt: int, payload: Any
    ) -> None:
        """Record one application of an effect at a participant (the world's own record, which the
        oracle reads)."""
        self.applications.append(
            Application(len(self.applications), participant, operation, key, attempt, payload)
        )

    @contextlib.contextmanager
    def call(self, instance_id: str, what: str, *, key: str = "") -> Iterator[None]:
        """A call of the engine for ``instance_id`` (under idempotency key ``key``) is in
        flight within the block."""
        calls = self.in_flight.setdefault(instance_id, [])
        clashing = [c for c in calls if not self.branches or (key and key in c)]
        if clashing:
            self.overlaps.append(Overlap(instance_id, clashing[0], what))
        calls.append(what)
        try:
            yield
        finally:
            if what in calls:  # An abandoned call was taken off already.
                calls.remove(what)

    @contextlib.contextmanager
    def execution(self, instance_id: str) -> Iterator[None]:
        """One copy of the instance's workflow code runs within the block."""
        running = self.executions.get(instance_id, 0)
        if running:
            self.overlaps.append(Overlap(instance_id, "workflow code", "workflow code"))
        self.executions[instance_id] = running + 1
        try:
            yield
        finally:
            self.executions[instance_id] -= 1

    def abandoned(self, instance_id: str, what: str) -> None:
        """The caller gave up on this call (cancelled it at its deadline): it no longer runs on
        the instance's behalf, whatever the participant does with it now."""
        calls = self.in_flight.get(instance_id, [])
        if what in calls:
            calls.remove(what)


@dataclass(slots=True)
class Rule:
    behavior: Behavior
    operation: str | None = None
    key_contains: str | None = None
    attempt: int | None = None
    times: int = 1

    def matches(self, operation: str, key: str, attempt: int) -> bool:
        return (
            self.times > 0
            and (self.operation is None or self.operation == operation)
            and (self.key_contains is None or self.key_contains in key)
            and (self.attempt is None or self.attempt == attempt)
        )


class ScriptedParticipant:
    """Example::

    world = World()
    bank = ScriptedParticipant("bank", world, operations={"charge": "compensatable"},
                               deduplicates=True)
    bank.script(Behavior.LOSE_REPLY, operation="charge", attempt=1)
    registry.add_participant(bank.participant)
    """

    def __init__(
        self,
        name: str,
        world: World,
        *,
        operations: Mapping[str, Classification | str],
        deduplicates: bool = False,
        lookup: bool = False,
        retry: RetryPolicy | None = None,
        compensations: Mapping[str, str] | None = None,
        preconditions: bool = False,
        lookup_retry: RetryPolicy | None = None,
        callbacks: Mapping[str, float] | None = None,
    ) -> None:
        self.name = name
        self.world = world
        self.deduplicates = deduplicates
        self.rules: list[Rule] = []
        self.chaos: tuple[random.Random, Mapping[Behavior, float]] | None = None
        self.received: list[tuple[str, int]] = []
        self.receipts: dict[str, dict[str, Any]] = {}
        self.fenced: dict[str, int] = {}
        self.late: list[tuple[str, str, int, Any]] = []
        self.misbehaved = 0
        # Lookups: scripted outages and a seeded outage rate (the world counts the misses).
        self.lookup_rules: list[tuple[LookupBehavior, int]] = []
        self.lookup_chaos: tuple[random.Random, float] | None = None
        # The instance each key was delivered for (a lookup names only the key).
        self.instance_of: dict[str, str] = {}
        # Operations that complete by callback (seconds to wait for it), and the requests of
        # theirs accepted and not yet applied or refused: key -> (operation, attempt, payload).
        self.callbacks = dict(callbacks or {})
        self.accepted: dict[str, tuple[str, int, Any]] = {}
        self.participant = (
            Participant(name, deduplicates=deduplicates, lookup_retry=lookup_retry)
            if lookup_retry is not None
            else Participant(name, deduplicates=deduplicates)
        )
        undo = dict(compensations or {})
        for operation, classification in operations.items():
            self.participant.effect(
                operation,
                classification=classification,
                retry=retry or RetryPolicy(),
                compensation=undo.get(operation),
                completes_by_callback=self.callbacks.get(operation),
            )(self._deliver)
        for operation in sorted(set(undo.values())):
            self.participant.compensation(
                operation,
                retry=retry or RetryPolicy(),
                precondition=self.precondition if preconditions else None,
            )(self._deliver)
        if lookup:
            self.participant.lookup(self.lookup)
            world.lookup_attempts_max[name] = self.participant.lookup_retry.attempts_max

    @classmethod
    def standing_in_for(cls, participant: Participant, world: World) -> ScriptedParticipant:
        """A scripted twin of a user's participant: same name, operations, classifications,
        deduplication and lookup, so the explorer can run the user's workflow code unchanged
        against it (see :meth:`take_over`; the user's retry policies stay in force)."""
        declarations = participant.effects.values()
        twin = cls(
            participant.name,
            world,
            operations={
                d.operation: d.classification for d in declarations if not d.is_compensation
            },
            deduplicates=participant.deduplicates,
            lookup=participant.lookup_function is not None,
            compensations={
                d.operation: d.compensation for d in declarations if d.compensation is not None
            },
            preconditions=any(d.precondition is not None for d in declarations),
            lookup_retry=participant.lookup_retry,
            callbacks={
                d.operation: d.completes_by_callback
                for d in declarations
                if d.completes_by_callback is not None
            },
        )
        return twin

    def take_over(self, participant: Participant) -> Callable[[], None]:
        """Point the user's declarations at this participant; call the result to undo it."""
        saved = {op: (d.function, d.precondition) for op, d in participant.effects.items()}
        lookup = participant.lookup_function
        for declaration in participant.effects.values():
            object.__setattr__(declaration, "function", self._deliver)
            if declaration.precondition is not None:
                object.__setattr__(declaration, "precondition", self.precondition)
        if lookup is not None:
            participant.lookup_function = self.lookup

        def restore() -> None:
            for op, (function, precondition) in saved.items():
                object.__setattr__(participant.effects[op], "function", function)
                object.__setattr__(participant.effects[op], "precondition", precondition)
            participant.lookup_function = lookup

        return restore

    def effect(self, operation: str) -> EffectDeclaration:
        """The declaration of this participant's ``operation``."""
        return self.participant.effects[operation]

    def script(
        self,
        behavior: Behavior,
        *,
        operation: str | None = None,
        key_contains: str | None = None,
        attempt: int | None = None,
        times: int = 1,
    ) -> None:
        """Misbehave on cue: apply ``behavior`` to the next ``times`` calls that match the
        operation, key and attempt given."""
        self.rules.append(Rule(behavior, operation, key_contains, attempt, times))

    def misbehave_at_random(
        self,
        rng: random.Random,
        rates: Mapping[Behavior, float],
        *,
        lookup_unreachable: float = 0.0,
    ) -> None:
        """Choose a behaviour per delivery (and whether its lookup is reachable, per ask) from
        a seeded generator (random mode)."""
        self.chaos = (rng, rates)
        if lookup_unreachable:
            self.lookup_chaos = (rng, lookup_unreachable)

    def lookup_down(self, times: int) -> None:
        """The next ``times`` lookups find the participant unreachable (an outage)."""
        self.lookup_rules.append((LookupBehavior.UNREACHABLE, times))

    @property
    def lookup_retry(self) -> RetryPolicy:
        """The lookup's retry policy, as the participant declares it."""
        return self.participant.lookup_retry

    # -- the participant's side --------------------------------------------------------------

    def _behavior(self, operation: str, key: str, attempt: int) -> Behavior:
        for rule in self.rules:
            if rule.matches(operation, key, attempt):
                rule.times -= 1
                return rule.behavior
        if self.chaos is not None:
            rng, rates = self.chaos
            draw = rng.random()
            for behavior, rate in rates.items():
                if draw < rate:
                    return behavior
                draw -= rate
        return Behavior.SUCCEED

    async def _deliver(self, call: EffectCall) -> dict[str, Any]:
        what = f"{self.name}.{call.operation} {call.idempotency_key} attempt {call.attempt}"
        self.instance_of[call.idempotency_key] = call.instance_id
        with self.world.call(call.instance_id, what, key=call.idempotency_key):
            return await self._respond(call, what)

    async def _respond(self, call: EffectCall, what: str) -> dict[str, Any]:
        key, attempt = call.idempotency_key, call.attempt
        self.received.append((key, attempt))
        behavior = self._behavior(call.operation, key, attempt)
        if behavior is not Behavior.SUCCEED:
            self.misbehaved += 1
        if behavior is Behavior.STALL and self.world.stall is not None:
            receipt = self._apply(call.operation, key, attempt, call.payload)
            await self.world.stall()
            return receipt
        if behavior is Behavior.STUBBORN and self.world.clock is not None:
            return await self._answer_late(call, what)
        if behavior is Behavior.REJECT:
            raise EffectRejectedError("scripted rejection", error_code="scripted")
        if behavior is Behavior.REJECT_FINAL:
            raise EffectRejectedError("scripted final rejection", retryable=False)
        if behavior is Behavior.TIMEOUT:
            raise TimeoutError("scripted timeout")
        if behavior is Behavior.LATE:
            self.late.append((call.operation, key, attempt, call.payload))
            raise TimeoutError("scripted: the request is still on its way")
        if call.operation in self.callbacks:
            receipt = self._accept(call.operation, key, attempt, call.payload)
        else:
            receipt = self._apply(call.operation, key, attempt, call.payload)
        if behavior is Behavior.LOSE_REPLY:
            raise LostReplyError("scripted: applied, reply lost")
        return receipt

    def _accept(self, operation: str, key: str, attempt: int, payload: Any) -> dict[str, Any]:
        """Take a request of an operation that completes by callback: nothing is applied
        yet (a deduplicating participant answers an applied key with its receipt)."""
        self._refuse_if_fenced(key, attempt)
        if not (self.deduplicates and key in self.receipts):
            self.accepted[key] = (operation, attempt, payload)
        return {"participant": self.name, "key": key, "attempt": attempt, "accepted": True}

    def call_back(self, key: str, *, apply: bool) -> tuple[bool, Any]:
        """Finish an accepted request: apply it (``apply``) or refuse it for good; return
        whether it is applied and the receipt. What was applied already stays applied, and a
        request a lookup fenced meanwhile can no longer apply: the answer is the truth."""
        if key in self.receipts:
            return True, self.receipts[key]
        pending = self.accepted.pop(key, None)
        if pending is None:
            return False, None
        operation, attempt, payload = pending
        if apply and attempt > self.fenced.get(key, 0):
            return True, self._apply(operation, key, attempt, payload)
        # "Not applied" is a promise: no attempt sent so far will ever apply.
        self.fenced[key] = max(self.fenced.get(key, 0), attempt)
        return False, None

    async def _answer_late(self, call: EffectCall, what: str) -> dict[str, Any]:
        """Apply, let the caller's deadline pass, ignore its cancellation and answer anyway."""
        key, attempt = call.idempotency_key, call.attempt
        receipt = self._apply(call.operation, key, attempt, call.payload)
        assert self.world.clock is not None
        if call.deadline_at is not None:
            self.world.clock.advance_to(call.deadline_at)
        try:
            await asyncio.get_running_loop().create_future()  # Only a cancellation ends it.
        except asyncio.CancelledError:
            self.world.abandoned(call.instance_id, what)
        self.world.late_answers.append((self.name, key, attempt))
        return {**receipt, "late": True}

    def _refuse_if_fenced(self, key: str, attempt: int) -> None:
        if attempt <= self.fenced.get(key, 0):
            raise EffectRejectedError(
                f"attempt {attempt} of {key} was fenced by a lookup",
                error_code="fenced",
                retryable=False,
            )

    def _apply(self, operation: str, key: str, attempt: int, payload: Any) -> dict[str, Any]:
        self._refuse_if_fenced(key, attempt)
        if self.deduplicates and key in self.receipts:
            return self.receipts[key]
        self.world.record(self.name, operation, key, attempt, payload)
        receipt = {"participant": self.name, "key": key, "attempt": attempt}
        self.receipts.setdefault(key, receipt)
        return receipt

    async def lookup(self, key: IdempotencyKey, attempt: int) -> LookupAnswer:
        """The participant's lookup: applied (with evidence), not applied (fencing the attempts
        asked about) or unknown."""
        with self.world.call(self.instance_of.get(key, key), f"{self.name} lookup {key}", key=key):
            return self._look_up(key, attempt)

    def _look_up(self, key: IdempotencyKey, attempt: int) -> LookupAnswer:
        misses = self.world.lookup_misses
        if self._lookup_behavior() is LookupBehavior.UNREACHABLE:
            misses[(self.name, key)] = misses.get((self.name, key), 0) + 1
            self.world.lookups_refused += 1
            raise ConnectionRefusedError(f"scripted: {self.name} is unreachable")
        misses.pop((self.name, key), None)
        if key in self.receipts and (self.name, key) not in self.world.drifted:
            return LookupAnswer.applied(self.receipts[key])
        self.fenced[key] = max(self.fenced.get(key, 0), attempt)
        return LookupAnswer.not_applied()

    def _lookup_behavior(self) -> LookupBehavior:
        if self.lookup_rules:
            behavior, times = self.lookup_rules[0]
            if times <= 1:
                self.lookup_rules.pop(0)
            else:
                self.lookup_rules[0] = (behavior, times - 1)
            return behavior
        if self.lookup_chaos is not None:
            rng, rate = self.lookup_chaos
            if rng.random() < rate:
                return LookupBehavior.UNREACHABLE
        return LookupBehavior.ANSWER

    async def precondition(self, call: EffectCall) -> Precondition:
        """A compensation may run only for what this participant applied, and need not run for
        what someone else already undid (see :meth:`reverse_elsewhere`)."""
        original = call.original_key or ""
        if original not in self.receipts:
            return Precondition.violated(f"nothing to undo: {original} was never applied here")
        if (self.name, original) in self.world.reversed:
            return Precondition.satisfied({"reversed_by": "someone else", "key": original})
        return Precondition.holds()

    def reverse_elsewhere(self, key: str) -> None:
        """Someone else undid this application behind the ledger's back (a manual refund)."""
        self.world.reversed.add((self.name, key))

    def deliver_late(self) -> int:
        """Let requests that were still on their way arrive now; fenced ones are refused."""
        arrived = 0
        pending, self.late = self.late, []
        for operation, key, attempt, payload in pending:
            try:
                self._apply(operation, key, attempt, payload)
                arrived += 1
            except EffectRejectedError:
                pass
        return arrived

    def drift(self, key: str) -> None:
        """The participant loses a fact behind the ledger's back (for reconciliation tests)."""
        self.world.drifted.add((self.name, key))

    def applied(self, key: str) -> int:
        """How many times the key was applied at this participant (the invariant: at most once)."""
        return sum(
            1 for a in self.world.applications if a.participant == self.name and a.key == key
        )
