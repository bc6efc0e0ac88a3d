"""The fault explorer: every crash point exhaustively, and many seeds at random.

A workflow that waits takes one path or another by what arrives (which event, from whom, a
timeout; a callback applied or not): the explorer first finds every path, running the scenario
without faults once per choice at each wait and asynchronous effect its runs meet (a tree
walked breadth first, each instance's choices apart, at most ``EXPLORER_PATHS_MAX`` paths).
Exhaustive mode then, on each path, counts the fault point hits of its fault-free run; it
crashes the worker at each hit in turn (depth 1), and for each of those at each hit of the
recovery that follows (depth 2: a crash during recovery). Refusals mode makes each effect a
path reached refuse for good, so the workflow fails there and compensates what came before (or
needs forward recovery after a pivot), and crashes at each hit of that compensation. Arrivals
mode makes a cancel request, and then each event the waits asked for (a probe no wait takes
when none did), arrive at each hit in turn (including between the last step and the end).
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
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ledgerflow import limits
from ledgerflow.testing.coverage import Coverage, EffectAt
from ledgerflow.testing.participants import Behavior
from ledgerflow.testing.plans import OutsideEvent, RandomPlan, Rates, ScheduledPlan
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
    coverage: Coverage = field(default_factory=Coverage)
    # Paths through the waits swept (exhaustive mode), and those past the bound left out (the
    # ones found waiting when it was reached: more may lie behind them).
    paths: int = 0
    paths_unexplored: int = 0

    def add(self, result: RunResult) -> None:
        """Count one run's figures and keep it if it failed."""
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
        self.coverage.add(result.coverage)
        if not result.ok:
            self.failures.append(result)

    @property
    def violations(self) -> int:
        """How many invariant violations the failed runs found."""
        return sum(len(r.violations) for r in self.failures)

    @property
    def non_vacuity(self) -> float:
        """Share of the workflow's own effects (effects, pivots, compensations, including
        those no run reached) that a fault touched in a run whose instance still ended."""
        return self.coverage.non_vacuity

    def shortest_failure(self) -> RunResult | None:
        """The failed run with the fewest faults and hits: the one to replay first."""
        return min(self.failures, key=lambda r: (len(r.fired), len(r.hits)), default=None)

    def figures(self) -> dict[str, object]:
        """The summary's figures as plain data."""
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
            "paths": self.paths,
            "paths_unexplored": self.paths_unexplored,
            "runs_ending_non_terminal": self.coverage.runs_non_terminal,
            "statuses": dict(self.statuses),
            "violations": self.violations,
            "seconds": round(self.seconds, 2),
        }


Progress = Callable[[RunResult], None]


@dataclass(frozen=True, slots=True)
class ArrivalPath:
    """One way through the waits and callbacks of a scenario's instances: the choices it
    pins (every other choice takes its first option), and the instance they belong to."""

    choices: Mapping[str, int]
    owner: str | None = None


@dataclass(slots=True)
class _Paths:
    found: list[tuple[ArrivalPath, RunResult]]
    unexplored: int


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
        self._paths: _Paths | None = None

    async def _run(
        self, plan: ScheduledPlan, label: str, prepare: Callable[[Scenario], None] | None = None
    ) -> RunResult:
        self._runs += 1
        result = await simulate(
            self.factory, plan, folder=self.folder, label=label, prepare=prepare
        )
        (self.folder / f"{label}.db").unlink(missing_ok=True)
        return result

    async def _sweep(
        self,
        summary: Summary,
        plan: ScheduledPlan,
        label: str,
        progress: Progress | None,
        prepare: Callable[[Scenario], None] | None = None,
    ) -> RunResult:
        """One run of a mode: judged, added to the mode's summary, shown on its progress."""
        result = await self._run(plan, label, prepare)
        summary.add(result)
        if progress:
            progress(result)
        return result

    async def paths(self) -> list[tuple[ArrivalPath, RunResult]]:
        """Every path through the waits and callbacks, each with its fault-free run (the
        first is the run that takes every first option). Found once per explorer."""
        if self._paths is None:
            self._paths = await self._find_paths()
        return self._paths.found

    async def _find_paths(self) -> _Paths:
        found: list[tuple[ArrivalPath, RunResult]] = []
        queue = deque([ArrivalPath({})])
        seen: set[frozenset[tuple[str, int]]] = {frozenset()}
        while queue and len(found) < limits.EXPLORER_PATHS_MAX:
            path = queue.popleft()
            label = f"path-{len(found)}" if found else "baseline"
            result = await self._run(ScheduledPlan(choices=path.choices), label)
            found.append((path, result))
            # Branch at each choice of this path's own instance past its pinned ones: the
            # choices before it in this run, then another option there.
            before: dict[str, dict[str, int]] = {}
            for decision in result.decisions:
                mine = before.setdefault(decision.instance, {})
                if decision.point not in path.choices and path.owner in (None, decision.instance):
                    for option in range(len(decision.options)):
                        choices = {**mine, decision.point: option}
                        if option != decision.chosen and frozenset(choices.items()) not in seen:
                            seen.add(frozenset(choices.items()))
                            queue.append(ArrivalPath(choices, decision.instance))
                mine[decision.point] = decision.chosen
        return _Paths(found, unexplored=len(queue))

    async def exhaustive(self, *, depth: int = 2, progress: Progress | None = None) -> Summary:
        """Explore every path, crashing the worker at every fault point hit (and again during
        recovery, to ``depth``), refusing each effect, and delivering each arrival at every hit;
        the summary of all runs."""
        started = time.monotonic()
        summary = Summary(mode=f"exhaustive depth {depth}")
        paths = await self.paths()
        summary.paths = len(paths)
        summary.paths_unexplored = self._paths.unexplored if self._paths else 0
        for n, (path, baseline) in enumerate(paths):
            summary.add(baseline)
            prefix = f"path-{n}-" if n else ""
            for first in range(1, len(baseline.hits) + 1):
                plan = ScheduledPlan(frozenset({first}), choices=path.choices)
                result = await self._sweep(summary, plan, f"{prefix}crash-{first}", progress)
                if depth < 2:
                    continue
                # The hits after the first crash are the recovery: crash again at each of them.
                for second in range(first + 1, len(result.hits) + 1):
                    plan = ScheduledPlan(frozenset({first, second}), choices=path.choices)
                    await self._sweep(summary, plan, f"{prefix}crash-{first}-{second}", progress)
        summary.seconds = time.monotonic() - started
        return summary

    async def refusals(self, *, progress: Progress | None = None) -> Summary:
        """Each forward effect a path reached refused for good by its participant (at every
        attempt): the workflow fails there, compensating what it confirmed before (or needing
        forward recovery past a pivot); then a crash at each hit of that compensation."""
        started = time.monotonic()
        summary = Summary(mode="refusals")
        refused: set[EffectAt] = set()
        for path, baseline in await self.paths():
            for at in baseline.coverage.effects_at:
                if at in refused:
                    continue
                refused.add(at)
                label = f"refuse-{at.participant}.{at.operation}-{at.instance}-s{at.seq}"
                prepare = _refusing(at)
                plan = ScheduledPlan(choices=path.choices)
                result = await self._sweep(summary, plan, label, progress, prepare)
                for index, hit in enumerate(result.hits, start=1):
                    if hit.split(" ", 2)[1].startswith("compensation."):
                        plan = ScheduledPlan(frozenset({index}), choices=path.choices)
                        await self._sweep(
                            summary, plan, f"{label}-crash-{index}", progress, prepare
                        )
        summary.seconds = time.monotonic() - started
        return summary

    async def arrivals(self, *, progress: Progress | None = None) -> Summary:
        """A cancel request at each fault point hit of the fault-free run, then each event the
        waits of any path asked for (the probe when none did) at each: whatever the moment,
        the request and the event end with an outcome."""
        started = time.monotonic()
        summary = Summary(mode="arrivals")
        paths = await self.paths()
        baseline = paths[0][1]
        summary.add(baseline)
        asked: dict[str, OutsideEvent] = {}
        for _, path_run in paths:
            for name, event in path_run.asked.items():
                asked.setdefault(name, event)
        events: list[OutsideEvent | None] = [*asked.values()] or [None]
        for at in range(1, len(baseline.hits) + 1):
            runs = [("cancel", ScheduledPlan(cancel_at=frozenset({at})))]
            for sent in events:
                kind = f"signal-{sent.name}" if sent is not None and len(events) > 1 else "signal"
                runs.append((kind, ScheduledPlan(signal_at=frozenset({at}), event=sent)))
            for kind, plan in runs:
                await self._sweep(summary, plan, f"{kind}-{at}", progress)
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
        """Run one seeded random fault schedule per seed over concurrent instances; the summary of
        all runs."""
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

        plan = RandomPlan(rng, rates or Rates(), choices=random.Random(f"choices-{seed}"))
        return await self._run(plan, f"seed-{seed}", misbehave)


def _refusing(at: EffectAt) -> Callable[[Scenario], None]:
    """Make the participant of ``at`` refuse that effect for good, at every attempt."""

    def prepare(scenario: Scenario) -> None:
        for participant in scenario.participants:
            if participant.name == at.participant:
                participant.script(
                    Behavior.REJECT_FINAL,
                    operation=at.operation,
                    key_contains=at.key,
                    times=limits.ATTEMPTS_MAX,
                )

    return prepare


class SeedBank:
    """Seeds that once failed, kept in a JSON file in the repository and run first."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def seeds(self) -> list[int]:
        """The seeds kept in the bank's file (none when it does not exist)."""
        if not self.path.exists():
            return []
        return [int(s) for s in json.loads(self.path.read_text())["seeds"]]

    def add(self, seed: int) -> None:
        """Keep ``seed`` in the bank's file."""
        seeds = sorted({*self.seeds(), seed})
        self.path.write_text(json.dumps({"seeds": seeds}, indent=2) + "\n")
