"""The fault explorer: every crash point exhaustively, and many seeds at random.

Exhaustive mode first runs the scenario without faults and counts its fault point hits; then it
crashes the worker at each hit in turn (depth 1), and for each of those at each hit of the
recovery that follows (depth 2: a crash during recovery). Arrivals mode makes a cancel request,
and then a signal, arrive at each hit in turn (including between the last step and the end).
Random mode runs seeds: each seed drives crashes, engine errors, arrivals, dropped store
connections and participant misbehaviour (rejections, timeouts, lost and late replies, store
stalls past the lease while a delivery is held, answers after the deadline, unreachable
lookups) from one generator, prints itself, and replays exactly. Seeds that ever failed are
kept in a seed bank and run first.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ledgerflow.testing.participants import Behavior
from ledgerflow.testing.plans import RandomPlan, Rates, ScheduledPlan
from ledgerflow.testing.simulation import (
    OutsideFaults,
    RunResult,
    Scenario,
    ScenarioFactory,
    simulate,
)

# Per delivery: about one in ten deliveries misbehaves; one in a hundred refuses for good, which
# fails the workflow and sends it down its compensation or forward-recovery path.
DEFAULT_MISBEHAVIOUR = {
    Behavior.LOSE_REPLY: 0.03,
    Behavior.TIMEOUT: 0.02,
    Behavior.REJECT: 0.03,
    Behavior.REJECT_FINAL: 0.01,
    Behavior.LATE: 0.02,
    Behavior.STALL: 0.01,
    Behavior.STUBBORN: 0.01,
}
# Per lookup: the participant is unreachable (outages are short: the lookup policy outlasts
# them unless several misses in a row happen to exhaust it).
DEFAULT_LOOKUP_UNREACHABLE = 0.2


@dataclass(slots=True)
class Summary:
    """What an exploration found, in figures."""

    mode: str
    runs: int = 0
    executions: int = 0
    crashes: int = 0
    errors: int = 0
    misbehaviours: int = 0
    stale_writes_refused: int = 0
    stale_writes_accepted: int = 0
    touched: int = 0
    touched_terminal: int = 0
    outside: OutsideFaults = field(default_factory=OutsideFaults)
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[RunResult] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, result: RunResult) -> None:
        self.runs += 1
        self.executions += result.executions
        self.crashes += result.crashes
        self.errors += result.errors
        self.misbehaviours += result.misbehaviours
        self.stale_writes_refused += result.stale_writes_refused
        self.stale_writes_accepted += result.stale_writes_accepted
        self.touched += result.touched
        self.touched_terminal += result.touched_terminal
        self.outside.add(result.outside)
        self.statuses.update(result.statuses)
        if not result.ok:
            self.failures.append(result)

    @property
    def violations(self) -> int:
        return sum(len(r.violations) for r in self.failures)

    @property
    def non_vacuity(self) -> float:
        """Share of executions a fault touched that still reached a terminal state."""
        return self.touched_terminal / self.touched if self.touched else 0.0

    def shortest_failure(self) -> RunResult | None:
        return min(self.failures, key=lambda r: (len(r.fired), len(r.hits)), default=None)

    def figures(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "runs": self.runs,
            "executions": self.executions,
            "crashes": self.crashes,
            "engine_errors": self.errors,
            "participant_misbehaviours": self.misbehaviours,
            "stale_writes_refused": self.stale_writes_refused,
            "stale_writes_accepted": self.stale_writes_accepted,
            **self.outside.figures(),
            "executions_touched_by_a_fault": self.touched,
            "non_vacuity": round(self.non_vacuity, 4),
            "statuses": dict(self.statuses),
            "violations": self.violations,
            "seconds": round(self.seconds, 2),
        }


Progress = Callable[[RunResult], None]


class Explorer:
    """Example::

    explorer = Explorer(make_scenario)
    summary = await explorer.exhaustive(depth=2)
    assert not summary.failures
    """

    def __init__(self, factory: ScenarioFactory, *, folder: Path | None = None) -> None:
        self.factory = factory
        self.folder = folder or Path(tempfile.mkdtemp(prefix="ledgerflow-explorer-"))
        self._runs = 0

    async def _run(
        self, plan: ScheduledPlan, label: str, prepare: Callable[[Scenario], None] | None = None
    ) -> RunResult:
        self._runs += 1
        result = await simulate(
            self.factory, plan, folder=self.folder, label=label, prepare=prepare
        )
        (self.folder / f"{label}.db").unlink(missing_ok=True)
        return result

    async def exhaustive(self, *, depth: int = 2, progress: Progress | None = None) -> Summary:
        started = time.monotonic()
        summary = Summary(mode=f"exhaustive depth {depth}")
        baseline = await self._run(ScheduledPlan(), "baseline")
        summary.add(baseline)
        for first in range(1, len(baseline.hits) + 1):
            plan = ScheduledPlan(frozenset({first}))
            result = await self._run(plan, f"crash-{first}")
            summary.add(result)
            if progress:
                progress(result)
            if depth < 2:
                continue
            # The hits after the first crash are the recovery: crash again at each of them.
            for second in range(first + 1, len(result.hits) + 1):
                nested = await self._run(
                    ScheduledPlan(frozenset({first, second})), f"crash-{first}-{second}"
                )
                summary.add(nested)
                if progress:
                    progress(nested)
        summary.seconds = time.monotonic() - started
        return summary

    async def arrivals(self, *, progress: Progress | None = None) -> Summary:
        """A cancel request at each fault point hit of the fault-free run, then a signal at
        each: whatever the moment, the request and the event end with an outcome."""
        started = time.monotonic()
        summary = Summary(mode="arrivals")
        baseline = await self._run(ScheduledPlan(), "baseline")
        summary.add(baseline)
        for at in range(1, len(baseline.hits) + 1):
            for kind, plan in (
                ("cancel", ScheduledPlan(cancel_at=frozenset({at}))),
                ("signal", ScheduledPlan(signal_at=frozenset({at}))),
            ):
                result = await self._run(plan, f"{kind}-{at}")
                summary.add(result)
                if progress:
                    progress(result)
        summary.seconds = time.monotonic() - started
        return summary

    async def random(
        self,
        seeds: Iterable[int],
        *,
        rates: Rates | None = None,
        misbehaviour: dict[Behavior, float] | None = None,
        lookup_unreachable: float = DEFAULT_LOOKUP_UNREACHABLE,
        progress: Progress | None = None,
    ) -> Summary:
        started = time.monotonic()
        summary = Summary(mode="random")
        for seed in seeds:
            result = await self.run_seed(
                seed,
                rates=rates,
                misbehaviour=misbehaviour,
                lookup_unreachable=lookup_unreachable,
            )
            summary.add(result)
            if progress:
                progress(result)
        summary.seconds = time.monotonic() - started
        return summary

    async def run_seed(
        self,
        seed: int,
        *,
        rates: Rates | None = None,
        misbehaviour: dict[Behavior, float] | None = None,
        lookup_unreachable: float = DEFAULT_LOOKUP_UNREACHABLE,
    ) -> RunResult:
        """One seed: the same seed always gives the same faults, the same run, the same verdict."""
        rng = random.Random(seed)
        chosen = misbehaviour or DEFAULT_MISBEHAVIOUR

        def misbehave(scenario: Scenario) -> None:
            for participant in scenario.participants:
                participant.misbehave_at_random(
                    random.Random(rng.random()),
                    chosen,
                    lookup_unreachable=lookup_unreachable,
                )

        return await self._run(RandomPlan(rng, rates or Rates()), f"seed-{seed}", misbehave)


class SeedBank:
    """Seeds that once failed, kept in a JSON file in the repository and run first."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def seeds(self) -> list[int]:
        if not self.path.exists():
            return []
        return [int(s) for s in json.loads(self.path.read_text())["seeds"]]

    def add(self, seed: int) -> None:
        seeds = sorted({*self.seeds(), seed})
        self.path.write_text(json.dumps({"seeds": seeds}, indent=2) + "\n")
