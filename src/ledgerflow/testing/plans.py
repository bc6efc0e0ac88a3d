"""Fault plans the explorer installs: crash at chosen hits, or at random from a seed.

Every hit of every named fault point is counted across the whole simulated run (all worker
lives), so "crash at hit 7, then at hit 12" names one exact schedule that replays the same way
every time. Besides crashes and engine errors a plan may make something arrive from outside at
a hit: a cancel request or a signal for the instance the hit belongs to (the simulation
delivers it, as another process would).

A plan also makes the run's choices of what arrives at a wait or for an asynchronous effect
(which scripted event, a timeout, a callback applied or not): a scheduled plan takes them from
its ``choices`` (the first option where it names none), a random plan from a generator of its
own, so a seed replays its choices too without changing the faults it draws.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledgerflow.runtime.faults import FaultPlan, InjectedError, SimulatedCrash


@dataclass(frozen=True, slots=True)
class Hit:
    index: int
    point: str
    where: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        detail = " ".join(f"{k}={v}" for k, v in self.where)
        return f"#{self.index} {self.point} {detail}"


CANCEL = "cancel"
SIGNAL = "signal"
# What arrives from outside at a hit: (kind, the hit, the business key it belongs to).
Arrive = Callable[[str, "Hit", str], None]


@dataclass(frozen=True, slots=True)
class OutsideEvent:
    """The event a signal arriving at a hit carries (None on a plan: the simulation sends
    what the instance's open wait asks for)."""

    name: str
    payload: Any = None
    sender: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """One choice of what arrives, made at a quiet moment of a run: at ``point`` (an
    instance's wait or asynchronous effect, named so it reads the same in every run that
    reaches it), option ``chosen`` of ``options``."""

    point: str
    instance: str
    options: tuple[str, ...]
    chosen: int

    def __str__(self) -> str:
        return f"{self.point}: {self.options[self.chosen]} (of {len(self.options)})"


class ScheduledPlan(FaultPlan):
    """Crash the worker at the listed hit numbers (1-based), or make a cancel request or a
    signal arrive there; record every hit."""

    def __init__(
        self,
        crash_at: frozenset[int] = frozenset(),
        *,
        cancel_at: frozenset[int] = frozenset(),
        signal_at: frozenset[int] = frozenset(),
        event: OutsideEvent | None = None,
        choices: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(rules=[])
        self.crash_at = crash_at
        self.cancel_at = cancel_at
        self.signal_at = signal_at
        self.event = event
        self.choices = dict(choices or {})
        self.decisions: list[Decision] = []
        self.hits: list[Hit] = []
        self.crashed_at: list[Hit] = []
        self.arrivals: list[tuple[str, Hit]] = []
        # Set by the simulation: delivers an arrival to the store.
        self.arrive: Arrive | None = None

    def _record(self, name: str, where: dict[str, Any]) -> Hit:
        hit = Hit(len(self.hits) + 1, name, tuple(sorted(where.items())))
        self.hits.append(hit)
        return hit

    def _arrival(self, kind: str, hit: Hit) -> None:
        key = dict(hit.where).get("instance")
        if self.arrive is not None and isinstance(key, str):
            self.arrivals.append((kind, hit))
            self.arrive(kind, hit, key)

    def choose(self, point: str, instance: str, options: tuple[str, ...]) -> int:
        """The option taken at ``point``: the one ``choices`` names, else the first."""
        chosen = self.choices.get(point, 0)
        return self._decided(point, instance, options, chosen if chosen < len(options) else 0)

    def _decided(self, point: str, instance: str, options: tuple[str, ...], chosen: int) -> int:
        self.decisions.append(Decision(point, instance, options, chosen))
        return chosen

    def hit(self, name: str, where: dict[str, Any]) -> None:
        hit = self._record(name, where)
        if hit.index in self.cancel_at:
            self._arrival(CANCEL, hit)
        if hit.index in self.signal_at:
            self._arrival(SIGNAL, hit)
        if hit.index in self.crash_at:
            self.crashed_at.append(hit)
            raise SimulatedCrash(str(hit))


@dataclass(slots=True)
class Rates:
    """Probabilities for random mode: per point hit, a crash, an engine error, a cancel request
    or a signal arriving; per store write (a commit or a claim), the connection dropping."""

    crash: float = 0.01
    error: float = 0.005
    crashes_max: int = 50
    cancel: float = 0.002
    signal: float = 0.005
    store_drop: float = 0.003
    extra: dict[str, float] = field(default_factory=dict)


class RandomPlan(ScheduledPlan):
    """Crash or raise at random, from a seed; bounded so every run reaches quiescence."""

    def __init__(
        self, rng: random.Random, rates: Rates, *, choices: random.Random | None = None
    ) -> None:
        super().__init__()
        self.rng = rng
        self.rates = rates
        self.errors: list[Hit] = []
        # Choices draw from their own generator: a workflow that waits changes nothing in the
        # faults a seed draws, and the same seed makes the same choices.
        self.chooser = choices or random.Random(f"choices:{rng.getstate()!r}")

    def choose(self, point: str, instance: str, options: tuple[str, ...]) -> int:
        return self._decided(point, instance, options, self.chooser.randrange(len(options)))

    def hit(self, name: str, where: dict[str, Any]) -> None:
        hit = self._record(name, where)
        draw = self.rng.random()
        arrival = self.rng.random()
        if arrival < self.rates.cancel:
            self._arrival(CANCEL, hit)
        elif arrival < self.rates.cancel + self.rates.signal:
            self._arrival(SIGNAL, hit)
        if len(self.crashed_at) + len(self.errors) >= self.rates.crashes_max:
            return
        if draw < self.rates.crash:
            self.crashed_at.append(hit)
            raise SimulatedCrash(str(hit))
        if draw < self.rates.crash + self.rates.error:
            self.errors.append(hit)
            raise InjectedError(str(hit))
