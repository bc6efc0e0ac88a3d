"""One owner's hold on one instance: its fence, its journal and how it commits (internal).

Every write the executor and the workflow context make goes through :meth:`Session.commit`,
which carries the owner and generation the store checks. A refused fence ends the session's
work on the instance at once (:class:`~ledgerflow.runtime.control.LostOwnership`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ledgerflow import limits
from ledgerflow.errors import (
    AttemptSupersededError,
    CancelArrivedError,
    ChildKeyConflictError,
    EventArrivedError,
    FencedOutError,
    InboxFullError,
    InstanceNotFoundError,
    KeyInUseError,
    StorageError,
    VersionRetiredError,
)
from ledgerflow.ledger.records import (
    Commit,
    Delivery,
    EffectHeartbeat,
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    Journal,
    KeepTraceContext,
    NoCancelRequest,
    Release,
    StepRecord,
    StepWrite,
    TimelineEntry,
    Write,
)
from ledgerflow.ledger.transaction import Deliver, Delivered, FromOutside, OutsideWrite, Transaction
from ledgerflow.ledger.transitions import new_step
from ledgerflow.ledger.values import PublishValue
from ledgerflow.model.codec import Codec
from ledgerflow.model.detection import DEFAULT_BOUNDS, DetectionBounds
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import Generation, InstanceId, StepSeq, WorkerId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.step import StepEvent, StepKind
from ledgerflow.runtime import child_endings, journal_log
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.control import Abandon, Cancelled, LostOwnership, Park, Suspend
from ledgerflow.runtime.doorbell import Doorbell
from ledgerflow.runtime.metrics import Metrics

if TYPE_CHECKING:
    from ledgerflow.runtime.flow import FlowGate

    # Imported only by an engine made with tracing (the otel extra).
    from ledgerflow.runtime.tracing import Tracing


# Refusals of a write beside the owner's (a send's target is not there or its inbox is full; a
# start's key names another instance, or its version is retired): nothing of the commit was
# written, and the owner records them (runtime/sends.py) rather than abandoning the instance.
BESIDE_REFUSALS = (InstanceNotFoundError, InboxFullError, KeyInUseError, VersionRetiredError)


class SessionStore(Protocol):
    """What a session asks of its store: a worker's is the store thread
    (:class:`~ledgerflow.runtime.store_thread.AsyncStore`); a replay check's answers nothing."""

    inline: bool

    @property
    def database_clock(self) -> bool:
        """Whether the store measures leases by its own clock (PostgreSQL)."""
        ...

    async def commit(self, commit: Commit | Transaction, *, now: float) -> Exception | None: ...

    async def pending_deliveries(self, instance_id: InstanceId, name: str) -> list[Delivery]: ...

    async def deliver(self, write: Deliver, *, now: float) -> Delivered | None: ...

    async def timeline(self, instance_id: InstanceId) -> list[TimelineEntry]: ...


@dataclass(slots=True, kw_only=True)
class Session:
    instance: InstanceRecord
    owner: WorkerId
    journal: Journal
    store: SessionStore
    codec: Codec
    clock: Clock
    # The worker's detection bounds (the poison-step bound applies while driving a step).
    detection: DetectionBounds = DEFAULT_BOUNDS
    # Where durable transitions are counted; None: metrics are off and nothing is counted.
    metrics: Metrics | None = None
    # Where spans go; None: nothing is traced (and OpenTelemetry is never imported).
    tracing: Tracing | None = None
    # The run span's trace context, kept with the instance by this session's next commit.
    trace_to_keep: str | None = None
    # Flow control on effects (runtime/flow.py); None: effects are dispatched unlimited.
    flow: FlowGate | None = None
    # Rung for each value a commit published (runtime/doorbell.py); None: nobody listens.
    doorbell: Doorbell | None = None
    # False once the worker is (simulated) dead: nothing it still runs may reach the store.
    alive: Callable[[], bool] = field(default=lambda: True)
    commits: int = field(default=0)
    # The instance's status as this session last wrote it (the claim's status until then).
    status: InstanceStatus = field(init=False)

    # Set from the claimed row, or by the worker's heartbeat when a request arrives later.
    cancel_requested: bool = field(init=False)

    reason: str | None = field(init=False)
    # What took the instance off its happy path, as the store keeps it (see InstanceWrite).
    cause: str | None = field(init=False)
    # True once this session gave the instance up (released, waiting or ended).
    released: bool = field(init=False, default=False)
    # Writes that ride with the next commit: a patch marker (``ctx.patched``) is decided at
    # once, in program order, and made durable no later than anything after it.
    riders: list[Write] = field(init=False, default_factory=list)
    # Local steps whose results ride (see ride_step): what ``step`` answers for them until
    # they are durable, and when the oldest of them was computed.
    _riding_steps: dict[StepSeq, StepRecord] = field(init=False, default_factory=dict)
    _riding_since: float | None = field(init=False, default=None)
    # Whether parallel branches of the run are live (the workflow context answers): their
    # intents are grouped into one commit, and nothing may release the instance meanwhile.
    branches_live: Callable[[], bool] = field(init=False, default=lambda: False)
    # Commits of one session go to the store one at a time: branches commit concurrently.
    _one_at_a_time: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    # Intents queued by branches in this turn of the loop, committed together.
    _intents: list[tuple[tuple[Write, ...], asyncio.Future[None]]] = field(
        init=False, default_factory=list
    )
    _intents_commit: asyncio.Task[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.status = self.instance.status
        self.reason = self.instance.reason
        self.cause = self.instance.cause
        self.cancel_requested = self.instance.cancel_requested_at is not None

    def ride_marker(self, seq: StepSeq, name: str, *, input: str | None, output: str) -> None:
        """A completed marker step at ``seq`` (a patch's decision, a published value, a taken
        update), made durable with the next commit: decided now, in program order."""
        self.riders.append(
            new_step(
                self.instance,
                seq,
                StepEvent.COMPLETE,
                kind=StepKind.MARKER,
                name=name,
                input=input,
                retry_policy=self.codec.encode(DEFAULT_STEP_RETRY.to_record()),
                now=self.clock.now(),
                output=output,
            )
        )

    def ride_step(self, write: StepWrite) -> bool:
        """A local step's result, made durable with the next commit (a local step runs at least
        once by contract: a crash before that commit runs it again). False when the results
        riding already reach ``limits.RIDING_STEPS_MAX`` or the oldest was computed
        ``limits.RIDING_STEP_SECONDS_MAX`` ago: the caller commits this one now, and the
        others go with it."""
        now = self.clock.now()
        if len(self._riding_steps) >= limits.RIDING_STEPS_MAX or (
            self._riding_since is not None
            and now - self._riding_since >= limits.RIDING_STEP_SECONDS_MAX
        ):
            return False
        self.riders.append(write)
        self._riding_steps[write.record.seq] = write.record
        if self._riding_since is None:
            self._riding_since = now
        return True

    @property
    def instance_id(self) -> InstanceId:
        return self.instance.instance_id

    @property
    def generation(self) -> Generation:
        return self.instance.generation

    async def commit(
        self,
        *writes: Write,
        beside: tuple[OutsideWrite, ...] = (),
        fences: tuple[FromOutside, ...] = (),
    ) -> None:
        """Make the writes durable in one transaction, or stop: nothing is half-written.

        ``beside``: writes to other instances (a child's start, an event for a parent) made in
        the same transaction, each on an instance ``fences`` checks from outside or one the
        write itself creates.

        While parallel branches run, commits are made one at a time, and the write-ahead
        intents the branches queue in one turn of the loop are made in one commit (all of
        them refused together when a cancel request won: none was dispatched)."""
        if not self.alive():
            raise Abandon("this worker is dead")
        if self.branches_live():
            if any(_releases(w) for w in writes):
                raise Park(
                    "concurrent_waits",
                    "the instance would be released while parallel branches run by a call "
                    "that is not held until every branch is blocked (runtime/branches.py): "
                    "await it before or after the branches",
                )
            if not beside and not fences and _intent(writes):
                await self._grouped(writes)
                return
        async with self._one_at_a_time:
            await self._commit_now(writes, beside=beside, fences=fences)

    async def _grouped(self, writes: tuple[Write, ...]) -> None:
        """Queue an intent; the first of a turn commits every intent queued by then."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Read even when its branch was cancelled meanwhile (the refusal reached the others).
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._intents.append((writes, future))
        if len(self._intents) == 1:
            # Not awaited by the caller: a cancelled branch must not stop the commit that
            # carries its siblings' intents.
            self._intents_commit = asyncio.ensure_future(self._commit_intents())
        await asyncio.shield(future)

    async def _commit_intents(self) -> None:
        await asyncio.sleep(0)  # the other branches of this turn queue theirs meanwhile
        async with self._one_at_a_time:
            queued, self._intents = self._intents, []
            merged = tuple(w for writes, _ in queued for w in writes if not _no_cancel(w))
            try:
                await self._commit_now((*merged, NoCancelRequest()))
            except BaseException as exc:  # noqa: BLE001 - each branch gets the refusal.
                for _, future in queued:
                    future.set_exception(exc)
            else:
                for _, future in queued:
                    future.set_result(None)

    async def _commit_now(
        self,
        writes: tuple[Write, ...],
        *,
        beside: tuple[OutsideWrite, ...] = (),
        fences: tuple[FromOutside, ...] = (),
    ) -> None:
        riding = len(self.riders)
        own = writes
        # Riders were decided first (program order): a run's switch must find its steps there.
        writes = (*self.riders, *writes)
        if self.trace_to_keep is not None:
            writes = (*writes, KeepTraceContext(trace_context=self.trace_to_keep))
        commit, unit = self._unit(writes, beside, fences)
        try:
            error = await self.store.commit(unit, now=self.clock.now())
        except StorageError as exc:
            raise Abandon(f"commit failed: {exc}") from exc
        if isinstance(error, FencedOutError):
            if self.metrics is not None:
                self.metrics.fenced(self.instance)
            raise LostOwnership(str(error))
        if isinstance(error, EventArrivedError | ChildKeyConflictError | AttemptSupersededError):
            # Nothing was written: the waiting code decides (the event wins), the workflow
            # does (a child's key another instance holds), or an effect's heartbeat is told
            # its attempt is no longer in flight.
            raise error
        if isinstance(error, CancelArrivedError):
            # The request won the race with a new step: nothing new starts, the owner cancels.
            self.cancel_requested = True
            steps = [w.record for w in own if isinstance(w, StepWrite)]
            what = f"step {steps[0].seq} ({steps[0].name})" if steps else "the next step"
            raise Cancelled(f"{what} was not started")
        if isinstance(error, BESIDE_REFUSALS) and (beside or fences):
            raise error  # A write beside the owner's was refused: the caller records it.
        if error is not None:
            # The store holds something other than what this session believed: never build
            # on that. Recovery re-reads the journal.
            raise Abandon(f"commit refused: {error}")
        self.commits += 1
        for rider in self.riders[:riding]:
            if isinstance(rider, StepWrite):
                self._riding_steps.pop(rider.record.seq, None)
        del self.riders[:riding]
        if not self._riding_steps:
            self._riding_since = None
        self.trace_to_keep = None
        journal_log.committed(self.instance, self.owner, commit.writes)
        if self.metrics is not None:
            self.metrics.committed(self.instance, commit.writes)
        if self.doorbell is not None:
            for write in writes:
                if isinstance(write, PublishValue):
                    self.doorbell.ring(self.instance_id, write.name)
        self._remember(writes)

    def _remember(self, writes: tuple[Write, ...]) -> None:
        """What a durable commit changed, as this session's own view of the instance."""
        for write in writes:
            if isinstance(write, StepWrite):
                self.journal.steps[write.record.seq] = write.record
            elif isinstance(write, EffectWrite):
                self.journal.effects[write.record.seq] = self._with_heartbeat(write.record)
            elif isinstance(write, EffectHeartbeat):
                self._heartbeat_written(write)
            elif isinstance(write, InstanceWrite):
                self.status = write.status
                self.reason = write.reason
                if write.status in (InstanceStatus.RUNNING, InstanceStatus.WAITING):
                    self.cause = None
                elif self.cause is None:
                    self.cause = write.cause
                self.released = self.released or write.release
            elif isinstance(write, Release):
                self.released = True

    def _with_heartbeat(self, record: EffectRecord) -> EffectRecord:
        """An effect's new state keeps the heartbeat the journal holds: the store's state
        writes never touch it, and a heartbeat committed while this write was being built
        (an attempt cut off mid-heartbeat) must not be forgotten here."""
        known = self.journal.effects.get(record.seq)
        if known is None or (
            known.heartbeat_attempt == record.heartbeat_attempt
            and known.heartbeat_generation == record.heartbeat_generation
            and known.heartbeat_details == record.heartbeat_details
        ):
            return record  # the common case, an effect without heartbeats: nothing to copy
        return dataclasses.replace(
            record,
            heartbeat_attempt=known.heartbeat_attempt,
            heartbeat_generation=known.heartbeat_generation,
            heartbeat_details=known.heartbeat_details,
        )

    def _heartbeat_written(self, write: EffectHeartbeat) -> None:
        """Keep the journal's effect as the store now holds it: the details the next attempt
        reads (the times are the store's and only the store compares them)."""
        effect = self.journal.effects.get(write.seq)
        if effect is None:
            return
        self.journal.effects[write.seq] = dataclasses.replace(
            effect,
            heartbeat_attempt=write.attempt,
            heartbeat_generation=self.generation,
            heartbeat_details=(
                write.details if write.details is not None else effect.heartbeat_details
            ),
        )

    def _unit(
        self,
        writes: tuple[Write, ...],
        beside: tuple[OutsideWrite, ...],
        fences: tuple[FromOutside, ...],
    ) -> tuple[Commit, Commit | Transaction]:
        """This owner's commit, and what goes to the store: the commit alone, or a transaction
        with the writes on other instances. A child's ending carries its outcome to its parent
        (see :mod:`ledgerflow.runtime.child_endings`)."""
        ending = child_endings.ending_writes(self.instance, self.journal, self.cause, writes)
        beside = (*beside, *ending)
        # The parent's row is locked before the child's own (fences from outside come first),
        # the order a parent's ending takes them in when it cancels its children: the two
        # endings racing wait for each other instead of deadlocking.
        fences = (*(FromOutside(instance_id=w.instance_id) for w in ending), *fences)
        commit = Commit(
            instance_id=self.instance_id,
            owner=self.owner,
            generation=self.generation,
            writes=writes,
        )
        if beside or fences:
            return commit, Transaction(commits=(commit,), fences=fences, writes=beside)
        return commit, commit

    async def wait_until(self, due: float | None) -> None:
        """Pause until ``due``: in the worker when short, else released with a durable wake-up."""
        if due is None:
            return
        pause = due - self.clock.now()
        if pause <= 0:
            return
        if pause <= limits.RETRY_INLINE_WAIT_SECONDS_MAX:
            await self.clock.sleep(pause)
            return
        raise Suspend(available_at=due)

    def traced(self, name: str, **attributes: Any) -> contextlib.AbstractContextManager[None]:
        """A span for work done now (never for what the journal replays); nothing without
        tracing."""
        if self.tracing is None:
            return contextlib.nullcontext()
        return self.tracing.span(name, self.instance, **attributes)

    def step(self, seq: StepSeq) -> StepRecord | None:
        riding = self._riding_steps.get(seq)
        return riding if riding is not None else self.journal.steps.get(seq)

    def effect(self, seq: StepSeq) -> EffectRecord | None:
        return self.journal.effects.get(seq)

    def confirmed_effects(self) -> list[EffectRecord]:
        return [e for e in self.journal.effects.values() if e.state is EffectState.CONFIRMED]


def _releases(write: Write) -> bool:
    return isinstance(write, Release) or (isinstance(write, InstanceWrite) and write.release)


def _no_cancel(write: Write) -> bool:
    return isinstance(write, NoCancelRequest)


def _intent(writes: tuple[Write, ...]) -> bool:
    """A write-ahead intent (or a start): steps and effects guarded by no cancel request."""
    return any(_no_cancel(w) for w in writes) and all(
        isinstance(w, (StepWrite, EffectWrite, NoCancelRequest)) for w in writes
    )
