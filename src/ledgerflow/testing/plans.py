"""Fault plans the explorer installs: crash at chosen hits, or at random from a seed.

Every hit of every named fault point is counted across the whole simulated run (all worker
lives), so "crash at hit 7, then at hit 12" names one exact schedule that replays the same way
every time.
"""

from __future__ import annotations

import random
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


class ScheduledPlan(FaultPlan):
    """Crash the worker at the listed hit numbers (1-based); record every hit."""

    def __init__(self, crash_at: frozenset[int] = frozenset()) -> None:
        super().__init__(rules=[])
        self.crash_at = crash_at
        self.hits: list[Hit] = []
        self.crashed_at: list[Hit] = []

    def _record(self, name: str, where: dict[str, Any]) -> Hit:
        hit = Hit(len(self.hits) + 1, name, tuple(sorted(where.items())))
        self.hits.append(hit)
        return hit

    def hit(self, name: str, where: dict[str, Any]) -> None:
        hit = self._record(name, where)
        if hit.index in self.crash_at:
            self.crashed_at.append(hit)
            raise SimulatedCrash(str(hit))


@dataclass(slots=True)
class Rates:
    """Probabilities per point hit (crash, raise) for random mode."""

    crash: float = 0.01
    error: float = 0.005
    crashes_max: int = 50
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
        if len(self.crashed_at) + len(self.errors) >= self.rates.crashes_max:
            return
        if draw < self.rates.crash:
            self.crashed_at.append(hit)
            raise SimulatedCrash(str(hit))
        if draw < self.rates.crash + self.rates.error:
            self.errors.append(hit)
            raise InjectedError(str(hit))
