"""One simulated run: start instances, drive them through faults to quiescence, check the oracle.

Everything runs in one event loop on a :class:`~ledgerflow.testing.clock.FakeClock`, with the
store called inline, so a run depends on nothing but its inputs and its fault plan. A crash
(``SimulatedCrash``) drops the engine and every object it held; the next worker life opens the
same SQLite file afresh after the dead worker's leases have lapsed. After quiescence the dead
workers come back as stale owners and try to write with their old generation: the store must
refuse every such write.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgerflow.errors import FencedOutError
from ledgerflow.model.definition import Registry
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import Generation, InstanceId, WorkerId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.runtime import faults
from ledgerflow.runtime.engine import Engine
from ledgerflow.runtime.faults import SimulatedCrash
from ledgerflow.storage.records import Commit, Release
from ledgerflow.testing import oracle
from ledgerflow.testing.clock import FakeClock
from ledgerflow.testing.participants import ScriptedParticipant, World
from ledgerflow.testing.plans import RandomPlan, ScheduledPlan

# Leases are long so that no lease lapses while a worker lives; a death then moves the clock
# past them. Worker lives and rounds are bounded so a broken engine cannot loop forever.
SIMULATED_LEASE_SECONDS = 1_000.0
ROUNDS_MAX = 500


@dataclass(slots=True)
class Scenario:
    """What one run starts: a registry bound to scripted participants, and its instances."""

    registry: Registry
    world: World
    participants: list[ScriptedParticipant]
    starts: list[tuple[str, str, Any]]
    # Undo what setting the scenario up changed outside it (see ScriptedParticipant.take_over).
    cleanup: list[Callable[[], None]] = field(default_factory=list)


ScenarioFactory = Callable[[], Scenario]


def scenario_for(
    registry: Registry, workflow: str, inputs: list[Any], *, copies: int = 1
) -> ScenarioFactory:
    """Run a user's workflow unchanged against scripted twins of its participants.

    Each twin declares what the user's participant declares (deduplication, lookup,
    classifications); the user's effect declarations are pointed at the twins for the run.
    """

    def make() -> Scenario:
        world = World()
        twins = []
        restores = []
        for participant in registry.participants.values():
            twin = ScriptedParticipant.standing_in_for(participant, world)
            restores.append(twin.take_over(participant))
            twins.append(twin)
        starts = [
            (workflow, f"sim-{n}-{copy}", value)
            for n, value in enumerate(inputs)
            for copy in range(copies)
        ]
        return Scenario(
            registry=registry, world=world, participants=twins, starts=starts, cleanup=restores
        )

    return make


@dataclass(slots=True)
class RunResult:
    label: str
    violations: list[oracle.Violation]
    statuses: Counter[str]
    crashes: int
    errors: int
    misbehaviours: int
    stale_writes_refused: int
    stale_writes_accepted: int
    touched: int
    touched_terminal: int
    hits: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def executions(self) -> int:
        return sum(self.statuses.values())


async def simulate(
    factory: ScenarioFactory,
    plan: ScheduledPlan,
    *,
    folder: Path,
    label: str,
    prepare: Callable[[Scenario], None] | None = None,
) -> RunResult:
    """Run one scenario under one fault plan to quiescence and judge it."""
    scenario = factory()
    if prepare is not None:
        prepare(scenario)
    run = _Run(scenario, url=f"sqlite:///{folder / (label + '.db')}?synchronous=off")
    faults.install(plan)
    try:
        await run.start()
        snapshot, (refused, accepted) = await run.to_quiescence(label)
    finally:
        faults.install(None)
        for undo in scenario.cleanup:
            undo()
    run.touched.update(_instances_with_misbehaviour(snapshot))
    terminal = {i.instance_id for i in snapshot.instances if i.status in TERMINAL_STATUSES}
    return RunResult(
        label=label,
        violations=oracle.check(snapshot, scenario.world),
        statuses=Counter(i.status.value for i in snapshot.instances),
        crashes=run.crashes,
        errors=len(plan.errors) if isinstance(plan, RandomPlan) else 0,
        misbehaviours=sum(p.misbehaved for p in scenario.participants),
        stale_writes_refused=refused,
        stale_writes_accepted=accepted,
        touched=len(run.touched),
        touched_terminal=len(run.touched & terminal),
        hits=[str(h) for h in plan.hits],
        fired=[
            str(h)
            for h in [*plan.crashed_at, *(plan.errors if isinstance(plan, RandomPlan) else [])]
        ],
    )


class _Run:
    """The worker lives of one simulated run, on one clock and one journal file."""

    def __init__(self, scenario: Scenario, *, url: str) -> None:
        self.scenario = scenario
        self.url = url
        self.clock = FakeClock()
        self.dead: list[tuple[InstanceId, WorkerId, Generation]] = []
        self.touched: set[str] = set()
        self.crashes = 0

    def _engine(self) -> Engine:
        return Engine(self.url, self.scenario.registry, clock=self.clock, inline=True)

    async def start(self) -> None:
        async with self._engine() as engine:
            for workflow, key, value in self.scenario.starts:
                await engine.start(workflow, key=key, input=value)

    async def to_quiescence(self, label: str) -> tuple[oracle.Snapshot, tuple[int, int]]:
        """Worker lives until nothing is runnable; then the dead owners try their writes."""
        for _ in range(ROUNDS_MAX):
            async with self._engine() as engine:
                if not await self._life(engine):
                    continue
                for participant in self.scenario.participants:
                    participant.deliver_late()
                due = engine.store.next_available_at()
                if due is None:
                    stale = _stale_owners_write(engine, self.dead, self.clock.now())
                    return oracle.Snapshot.of(engine.store), stale
            self.clock.advance_to(due)
        raise RuntimeError(f"{label}: no quiescence after {ROUNDS_MAX} worker rounds")

    async def _life(self, engine: Engine) -> bool:
        """One worker life until nothing is due; False when it died."""
        worker = engine.worker(
            lease_seconds=SIMULATED_LEASE_SECONDS,
            poll_seconds=3_600.0,
            concurrency=max(1, min(len(self.scenario.starts), 256)),
        )
        try:
            await worker.run(until_nothing_due=True)
        except SimulatedCrash:
            self.crashes += 1
            held = [i for i in engine.store.list_instances(limit=100_000) if i.owner == worker.id]
            self.dead.extend((i.instance_id, worker.id, i.generation) for i in held)
            self.touched.update(i.instance_id for i in held)
            self.clock.advance(SIMULATED_LEASE_SECONDS + 1)
            return False
        return True


def _stale_owners_write(
    engine: Engine, dead: list[tuple[InstanceId, WorkerId, Generation]], now: float
) -> tuple[int, int]:
    """Each dead owner wakes up and gives its instance back, with its old generation."""
    refused = accepted = 0
    for instance_id, owner, generation in dead:
        commit = Commit(
            instance_id=instance_id,
            owner=owner,
            generation=generation,
            writes=(Release(available_at=now),),
        )
        [error] = engine.store.commit([commit], now=now)
        if isinstance(error, FencedOutError):
            refused += 1
        elif error is None:
            accepted += 1
    return refused, accepted


def _instances_with_misbehaviour(snapshot: oracle.Snapshot) -> set[str]:
    """Instances whose effects needed more than one attempt: a participant fault touched them."""
    return {
        e.instance_id
        for effects in snapshot.effects.values()
        for e in effects
        if e.attempt > 1 or e.state is EffectState.UNKNOWN
    }
