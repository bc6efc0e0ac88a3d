"""Fault plans the explorer installs: crash at chosen hits, or at random from a seed.

Every hit of every named fault point is counted across the whole simulated run (all worker
lives), so "crash at hit 7, then at hit 12" names one exact schedule that replays the same way
every time. Besides crashes and engine errors a plan may make something arrive from outside at
a hit: a cancel request or a signal for the instance the hit belongs to (the simulation
delivers it, as another process would).
"""

from __future__ import annotations

import random
from collections.abc import Callable
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


class ScheduledPlan(FaultPlan):
    """Crash the worker at the listed hit numbers (1-based), or make a cancel request or a
    signal arrive there; record every hit."""

    def __init__(
        self,
        crash_at: frozenset[int] = frozenset(),
        *,
        cancel_at: frozenset[int] = frozenset(),
        signal_at: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(rules=[])
        self.crash_at = crash_at
        self.cancel_at = cancel_at
        self.signal_at = signal_at
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

    def __init__(self, rng: random.Random, rates: Rates) -> None:
        super().__init__()
        self.rng = rng
        self.rates = rates
        self.errors: list[Hit] = []

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
