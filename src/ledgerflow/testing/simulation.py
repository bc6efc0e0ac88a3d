"""One simulated run: start instances, drive them through faults to quiescence, check the oracle.

Everything runs in one event loop on a :class:`~ledgerflow.testing.clock.FakeClock`, with the
store called inline, so a run depends on nothing but its inputs and its fault plan. A crash
(``SimulatedCrash``) drops the engine and every object it held; the next worker life opens the
same SQLite file afresh after the dead worker's leases have lapsed. After quiescence the dead
workers come back as stale owners and try to write with their old generation: the store must
refuse every such write.

Faults from outside the worker are simulated here too: a cancel request or a signal arriving at
a fault point (as from another process), a store that stalls for longer than the lease while a
participant holds a delivery (the clock jumps past every lease and the worker is let claim),
and, in random mode, a connection that drops around a commit or a claim. Each copy of an
instance's workflow code is counted while it runs, so two at once are seen.

At every quiet moment (nothing due, time about to move) the waits and asynchronous effects the
instances ask for get what the plan chooses (:mod:`ledgerflow.testing.arrivals`), so a run goes
past every wait; after quiescence the run is read back for coverage
(:mod:`ledgerflow.testing.coverage`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import FencedOutError
from ledgerflow.ledger.records import Commit, Release
from ledgerflow.ledger.transaction import Deliver, RequestCancel
from ledgerflow.model.codec import JSON
from ledgerflow.model.definition import Registry, WorkflowDefinition, WorkflowFunction
from ledgerflow.model.effect import EffectState
from ledgerflow.model.examples import Events, Example
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey, Generation, InstanceId, WorkerId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.model.signal import UPDATE_PREFIX
from ledgerflow.runtime import faults
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.engine import Engine
from ledgerflow.runtime.faults import SimulatedCrash
from ledgerflow.runtime.replay import ReplayContext, replay
from ledgerflow.runtime.worker import Worker
from ledgerflow.storage import open_store
from ledgerflow.testing import oracle
from ledgerflow.testing.arrivals import ArrivalDriver, event_at_hit
from ledgerflow.testing.clock import FakeClock
from ledgerflow.testing.coverage import Item, RunCoverage, declared, observe
from ledgerflow.testing.drift import VersionDrift
from ledgerflow.testing.dropping_store import DroppingStore, dropping
from ledgerflow.testing.participants import ScriptedParticipant, World
from ledgerflow.testing.plans import CANCEL, Decision, Hit, OutsideEvent, RandomPlan, ScheduledPlan
from ledgerflow.testing.rolled_back import RolledBackCallers, rolled_back_invisible
from ledgerflow.testing.schedule_checks import one_firing_per_slot
from ledgerflow.testing.schedule_sweep import ScheduleDriver
from ledgerflow.testing.start_sweep import StartCallers, StartSpec

# Leases are long so that no lease lapses while a worker lives; a death then moves the clock
# past them. Worker lives and rounds are bounded so a broken engine cannot loop forever.
SIMULATED_LEASE_SECONDS = 1_000.0
ROUNDS_MAX = 500
# A stall gives the worker this many turns of the loop to claim while the delivery is held.
STALL_TURNS_MAX = 1_000


@dataclass(slots=True)
class Scenario:
    """What one run starts: a registry bound to scripted participants, and its instances."""

    registry: Registry
    world: World
    participants: list[ScriptedParticipant]
    starts: list[tuple[str, str, Any]]
    # Undo what setting the scenario up changed outside it (see ScriptedParticipant.take_over).
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    # What a signal arriving from outside at a fault point is named; None: what the instance's
    # open wait asks for then (or, with no wait open, a probe no wait takes).
    signal: str | None = None
    # Per business key, the arrivals scripted for its waits (see ledgerflow.model.examples).
    events: dict[str, Events] = field(default_factory=dict)
    # Version drift: workers with this changed code replace the first worker after its first
    # life, and (``upgrade_on_drift``) an operator then upgrades what replays clean against it.
    drift: Registry | None = None
    upgrade_on_drift: bool = True
    # Starts made under the plan, by callers that retry after dying (testing.start_sweep).
    swept_starts: StartSpec | None = None
    # The registry's schedules fire their slots for this long (testing.schedule_sweep).
    schedule_horizon: float = 0.0


ScenarioFactory = Callable[[], Scenario]

POSITIONS_REPLAY = "positions-replay"


async def replayed_positions(url: str, scenario: Scenario) -> list[oracle.Violation]:
    """In a scenario with parallel branches, every history replays at its own positions
    against its own code: the calls of the branches take, on a replay, the positions the run
    journaled, whatever order they finished in before or after each crash (the replay
    checker, nothing dispatched)."""
    if not scenario.world.branches:
        return []
    registry = scenario.registry
    store = open_store(url)
    try:
        found = []
        for instance in store.list_instances(limit=limits.READ_BATCH_MAX):
            journal = store.journal(instance.instance_id, instance.run)
            definition = registry.get(instance.workflow_name, instance.workflow_version)
            verdict = await replay(definition, instance, journal, codec=JSON)
            if not verdict.compatible:
                found.append(
                    oracle.Violation(
                        POSITIONS_REPLAY,
                        instance.instance_id,
                        f"its journal does not replay at its positions: {verdict.reason}",
                    )
                )
        return found
    finally:
        store.close()


def scenario_for(
    registry: Registry,
    workflow: str,
    inputs: list[Any],
    *,
    copies: int = 1,
    drift: Registry | None = None,
    upgrade_on_drift: bool = True,
    signal: str | None = None,
    events: Events | None = None,
    starts: StartSpec | None = None,
) -> ScenarioFactory:
    """Run a user's workflow unchanged against scripted twins of its participants.

    Each twin declares what the user's participant declares (deduplication, lookup,
    classifications, callbacks); the user's effect declarations are pointed at the twins for
    the run. ``drift`` is changed code for the same workflow versions: a worker with it
    appears after the first worker's first life (see :class:`Scenario`). ``signal`` names the
    event that arrives from outside at a fault point (default: what the open wait asks for).
    An input may be an :class:`~ledgerflow.model.examples.Example`, whose events replace the
    common ``events`` for the names it lists. ``starts`` sweeps the starts too, made with
    its options by callers that retry (see :mod:`ledgerflow.testing.start_sweep`).
    """

    def make() -> Scenario:
        world = World()
        twins = []
        restores = []
        for participant in registry.participants.values():
            twin = ScriptedParticipant.standing_in_for(participant, world)
            restores.append(twin.take_over(participant))
            twins.append(twin)
        by_name = {twin.participant.name: twin for twin in twins}
        for participant in drift.participants.values() if drift else ():
            # One participant, whichever code calls it: the same twin keeps its state.
            twin = by_name.get(participant.name) or ScriptedParticipant.standing_in_for(
                participant, world
            )
            restores.append(twin.take_over(participant))
            if participant.name not in by_name:
                twins.append(twin)
        made: list[tuple[str, str, Any]] = []
        scripts: dict[str, Events] = {}
        for n, value in enumerate(inputs):
            example = value if isinstance(value, Example) else Example(value)
            for copy in range(copies):
                key = f"sim-{n}-{copy}"
                made.append((workflow, key, example.input))
                scripts[key] = {**(events or {}), **example.events}
        return Scenario(
            registry=registry,
            world=world,
            participants=twins,
            starts=made,
            cleanup=restores,
            drift=drift,
            upgrade_on_drift=upgrade_on_drift,
            signal=signal,
            events=scripts,
            swept_starts=starts,
        )

    return make


@dataclass(slots=True)
class OutsideFaults:
    """Faults from outside the worker in one run (or summed over many): cancel requests and
    signals that arrived, store stalls past the lease, answers given after their deadline,
    lookups refused by an unreachable participant, and dropped store connections; and what
    the waits and asynchronous effects were sent at quiet moments (events, callbacks)."""

    cancels: int = 0
    signals: int = 0
    stalls: int = 0
    late_answers: int = 0
    lookup_misses: int = 0
    store_drops: int = 0
    deliveries: int = 0
    callbacks: int = 0

    def add(self, other: OutsideFaults) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def figures(self) -> dict[str, int]:
        return {
            "cancel_requests": self.cancels,
            "signals": self.signals,
            "store_stalls_past_the_lease": self.stalls,
            "answers_after_the_deadline": self.late_answers,
            "lookups_unreachable": self.lookup_misses,
            "store_connections_dropped": self.store_drops,
            "events_sent_to_waits": self.deliveries,
            "callbacks_answered": self.callbacks,
        }


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
    # What arrived from outside, and where ("cancel at #12 ...").
    arrived: list[str] = field(default_factory=list)
    outside: OutsideFaults = field(default_factory=lambda: OutsideFaults())
    # Version drift: instances moved to the changed code after a clean replay.
    upgraded: int = 0
    # The choices made of what arrived at waits and asynchronous effects, in order; the event
    # each wait name asked for; and what the run reached, item by item.
    decisions: list[Decision] = field(default_factory=list)
    asked: dict[str, OutsideEvent] = field(default_factory=dict)
    coverage: RunCoverage = field(default_factory=RunCoverage)

    @property
    def ok(self) -> bool:
        """Whether the run broke no invariant."""
        return not self.violations

    @property
    def executions(self) -> int:
        """How many instances the run executed, whatever their ending."""
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
    # Read before the workflow functions are wrapped for counting: it walks their code.
    started = {workflow for workflow, _, _ in scenario.starts}
    catalogue = declared(d for d in scenario.registry.definitions() if d.name in started)
    scenario.cleanup.extend(_count_executions(scenario.registry, scenario.world))
    if scenario.drift is not None:
        scenario.cleanup.extend(_count_executions(scenario.drift, scenario.world))
    run = _Run(scenario, plan, url=f"sqlite:///{folder / (label + '.db')}?synchronous=off")
    try:
        await run.start()  # before the plan unless swept: see _Run.start
        faults.install(plan)
        snapshot, (refused, accepted), reached = await run.to_quiescence(label, catalogue)
    finally:
        faults.install(None)
        for undo in scenario.cleanup:
            undo()
    run.touched.update(_instances_with_misbehaviour(snapshot))
    terminal = {i.instance_id for i in snapshot.instances if i.status in TERMINAL_STATUSES}
    return RunResult(
        label=label,
        violations=[
            *oracle.check(snapshot, scenario.world),
            *await replayed_positions(run.url, scenario),
            *run.left_behind(),
            *await run.drift.judge(run.url, scenario.world),
        ],
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
            for h in [
                *plan.crashed_at,
                *(plan.errors if isinstance(plan, RandomPlan) else []),
                *(h for _, h in plan.arrivals),
            ]
        ],
        arrived=[f"{kind} at {h}" for kind, h in plan.arrivals],
        upgraded=run.drift.upgraded,
        decisions=list(plan.decisions),
        asked=dict(run.driver.asked),
        coverage=reached,
        outside=OutsideFaults(
            cancels=sum(1 for kind, _ in plan.arrivals if kind == CANCEL),
            signals=sum(1 for kind, _ in plan.arrivals if kind != CANCEL),
            stalls=run.stalls,
            late_answers=len(scenario.world.late_answers),
            lookup_misses=scenario.world.lookups_refused,
            store_drops=run.store_drops,
            deliveries=run.driver.delivered,
            callbacks=run.driver.callbacks,
        ),
    )


def _count_executions(registry: Registry, world: World) -> list[Callable[[], None]]:
    """Wrap every workflow function so the world counts the copies of each instance running;
    return how to unwrap them. The fingerprint stays the one of the user's code."""
    restores: list[Callable[[], None]] = []
    for definition in registry.definitions():
        original = definition.function
        counted = _counted(world, original, definition.fingerprint)
        object.__setattr__(definition, "function", counted)
        restores.append(_restore(definition, original))
    return restores


def _counted(world: World, function: WorkflowFunction, fingerprint: str) -> WorkflowFunction:
    async def counted(ctx: Any, value: Any) -> Any:
        if not isinstance(ctx, ReplayContext):  # a replay check runs nothing
            world.ran_on.setdefault(ctx.instance_id, []).append(fingerprint)
        with world.execution(ctx.instance_id):
            return await function(ctx, value)

    return counted


def _restore(definition: WorkflowDefinition, function: WorkflowFunction) -> Callable[[], None]:
    return lambda: object.__setattr__(definition, "function", function)


class _Run:
    """The worker lives of one simulated run, on one clock and one journal file."""

    def __init__(self, scenario: Scenario, plan: ScheduledPlan, *, url: str) -> None:
        self.scenario = scenario
        self.plan = plan
        self.url = url
        self.clock = FakeClock()
        self.dead: list[tuple[InstanceId, WorkerId, Generation]] = []
        self.touched: set[str] = set()
        self.crashes = 0
        self.stalls = 0
        self.store_drops = 0
        self.engine: Engine | None = None
        # Waiting instances found asleep past an arrival at a quiet moment (see oracle).
        self.lost_wakeups: list[oracle.Violation] = []
        self.worker: Worker | None = None
        self.workflow_of = {key: workflow for workflow, key, _ in scenario.starts}
        self.input_of = {key: value for _, key, value in scenario.starts}
        # A caller's transaction that dies before its COMMIT arrives with every arrival.
        self.rolled_back = RolledBackCallers(url.removeprefix("sqlite:///").partition("?")[0])
        # The code the next worker life runs: the scenario's, then its drift (once it came).
        self.registry = scenario.registry
        self.drift = VersionDrift(
            scenario.registry, scenario.drift, upgrade=scenario.upgrade_on_drift
        )
        self.driver = ArrivalDriver(scenario.events, scenario.participants)
        self.callers = StartCallers(scenario.swept_starts) if scenario.swept_starts else None
        self.schedules = ScheduleDriver(
            declared=bool(scenario.registry.schedules),
            started_at=self.clock.now(),
            horizon=scenario.schedule_horizon,
        )
        plan.arrive = self._arrive
        scenario.world.clock = self.clock
        scenario.world.stall = self._stall

    def _engine(self) -> Engine:
        store = open_store(self.url)
        if isinstance(self.plan, RandomPlan) and self.plan.rates.store_drop:
            store = dropping(store, self.plan.rng, self.plan.rates.store_drop)
        self.engine = Engine(store, self.registry, clock=self.clock, inline=True)
        return self.engine

    async def start(self) -> None:
        """The scenario's starts, made before the plan is installed: their points
        (``start.*``) are not swept (a crash there is the starting caller's), so the hits a
        plan numbers are the workers' lives' — unless the scenario sweeps its starts: then
        callers that retry make them under the plan."""
        if self.callers is not None:
            faults.install(self.plan)
        async with Engine(self.url, self.scenario.registry, clock=self.clock, inline=True) as e:
            for workflow, key, value in self.scenario.starts:
                if self.callers is not None:
                    await self.callers.start(e, workflow, key, value)
                else:
                    await e.start(workflow, key=key, input=value)

    async def to_quiescence(
        self, label: str, catalogue: dict[Item, str]
    ) -> tuple[oracle.Snapshot, tuple[int, int], RunCoverage]:
        """Worker lives until nothing is runnable and nothing is left to arrive; then the dead
        owners try their writes, and the run is read back."""
        for _ in range(ROUNDS_MAX):
            async with self._engine() as engine:
                alive = await self._life(engine)
                self._count_drops(engine)
                if self.drift.pending:
                    self.registry = await self.drift.arrives(engine.store, clock=self.clock)
                if not alive:
                    continue
                for participant in self.scenario.participants:
                    participant.deliver_late()
                # Only what the next life's code can claim: work pinned to other code waits
                # for a worker that serves it (none comes in a simulation), it is not due here.
                due = engine.store.next_available_at(self.registry.served(), self.registry.adopts())
                self.schedules.close_past_horizon(engine.store, now=self.clock.now())
                due = self.schedules.next_due(engine.store, due, now=self.clock.now())
                # Nothing is due now: time is about to move. What arrived must not wait for it.
                self.lost_wakeups.extend(oracle.lost_wakeups(engine.store, now=self.clock.now()))
                # What the waits ask for arrives before time moves (then the run goes on now).
                if await self.driver.at_quiet_moment(engine, self.plan):
                    continue
            if due is None:
                # Judged on a store of its own: the faults of the lives are over.
                async with Engine(self.url, self.scenario.registry, clock=self.clock) as final:
                    stale = _stale_owners_write(final, self.dead, self.clock.now())
                    reached = observe(
                        final.store,
                        registry=self.scenario.registry,
                        catalogue=catalogue,
                        faults=self._faults(),
                    )
                    reached.defaulted = set(self.driver.defaulted)
                    return oracle.Snapshot.of(final.store), stale, reached
            self.clock.advance_to(due)
        raise RuntimeError(f"{label}: no quiescence after {ROUNDS_MAX} worker rounds")

    def left_behind(self) -> list[oracle.Violation]:
        """What came from outside and went wrong: a lost wake-up (found at a quiet moment), or
        anything left visible by a caller whose transaction never committed."""
        return [*self.lost_wakeups, *_rolled_back_left(self.url, self.callers)]

    def _faults(self) -> list[Hit]:
        """The crashes and engine errors the plan fired, where they hit."""
        errors = self.plan.errors if isinstance(self.plan, RandomPlan) else []
        return [*self.plan.crashed_at, *errors]

    def _count_drops(self, engine: Engine) -> None:
        store = engine.store
        if isinstance(store, DroppingStore):
            self.store_drops += len(store.dropped)

    async def _life(self, engine: Engine) -> bool:
        """One worker life until nothing is due; False when it died."""
        # Room beside every instance, so that a claim during a stall could take any of them.
        self.worker = worker = engine.worker(
            lease_seconds=SIMULATED_LEASE_SECONDS,
            poll_seconds=3_600.0,
            concurrency=max(2, min(len(self.scenario.starts) + 1, 256)),
            schedules=False,  # ticked at the life's start instead: see testing.schedule_sweep
        )
        try:
            await self.schedules.tick(engine)
            await worker.run(until_nothing_due=True)
        except SimulatedCrash:
            self.crashes += 1
            held = [i for i in engine.store.list_instances(limit=100_000) if i.owner == worker.id]
            self.dead.extend((i.instance_id, worker.id, i.generation) for i in held)
            self.touched.update(i.instance_id for i in held)
            self.clock.advance(SIMULATED_LEASE_SECONDS + 1)
            return False
        return True

    async def _stall(self) -> None:
        """The store stalls for longer than the lease while a delivery is held: every lease of
        this worker lapses, and the worker gets turns of the loop to claim meanwhile."""
        self.stalls += 1
        self.clock.advance(SIMULATED_LEASE_SECONDS + 1)
        worker = self.worker
        if worker is None:
            return
        claims = worker.claims
        worker.wake()
        for _ in range(STALL_TURNS_MAX):
            if worker.claims > claims:
                break
            await asyncio.sleep(0)

    def _arrive(self, kind: str, hit: Hit, key: str) -> None:
        """A cancel request or a signal arrives for the instance of ``key``, from outside."""
        engine = self.engine
        workflow = self.workflow_of.get(key)
        if engine is None or workflow is None:
            return
        instance_id = instance_id_for(DEFAULT_TENANT, workflow, BusinessKey(key))
        self.rolled_back.arrive(
            engine.store,
            registry=self.registry,
            codec=engine.codec,
            clock=self.clock,
            workflow=workflow,
            value=self.input_of[key],
            instance_id=instance_id,
            at=hit.index,
        )
        now = self.clock.now()
        if kind == CANCEL:
            engine.store.request_cancel(
                RequestCancel(instance_id=instance_id, reason=f"explorer: at {hit}"), now=now
            )
            return
        record = engine.store.get_instance(instance_id)
        if record is None:
            return
        event = event_at_hit(
            engine.store,
            record,
            self.scenario.events.get(key, {}),
            named=self.scenario.signal,
            planned=self.plan.event,
        )
        engine.store.deliver(
            Deliver(
                instance_id=instance_id,
                # An update request's id is its update id's (ledger/values.py).
                event_id=f"{UPDATE_PREFIX if event.name.startswith(UPDATE_PREFIX) else ''}"
                f"probe-{hit.index}",
                name=event.name,
                payload=engine.codec.encode(event.payload),
                sender=event.sender,
            ),
            now=now,
        )


def _rolled_back_left(url: str, callers: StartCallers | None) -> list[oracle.Violation]:
    """What the callers that died before their COMMIT left visible (nothing, or a violation),
    and what the retrying callers of swept starts were answered."""
    store = open_store(url)
    try:
        return [
            *rolled_back_invisible(store),
            *(callers.judge(store) if callers else []),
            *one_firing_per_slot(store),
        ]
    finally:
        store.close()


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
