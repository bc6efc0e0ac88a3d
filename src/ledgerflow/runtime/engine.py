"""The engine: start instances by business key, wait for results, read the ledgers.

:class:`Engine` is the asyncio front door (and
:class:`~ledgerflow.runtime.sync_engine.SyncEngine` the same for synchronous code); both open
one store from a URL and share the rules of :mod:`ledgerflow.runtime.core`. Workers are made
with :meth:`Engine.worker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Unpack

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError, InstanceNotFoundError, ResultTimeoutError
from ledgerflow.extras import require_extra
from ledgerflow.ledger.records import Delivery, InstanceRecord
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry, WorkflowFunction
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.flow import FlowLimit
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime import faults
from ledgerflow.runtime.adoption import Adopter
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.runtime.core import (
    CancelRequested,
    CompletionOptions,
    Delivered,
    DeliveryOutcome,
    EngineCore,
    InstanceDetail,
    ListOptions,
    SignalOptions,
    SignalStarted,
    Started,
    StartOptions,
    detail_of,
    instance_id_for,
)
from ledgerflow.runtime.detection import bounds_from_environment, detection_task
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.runtime.periodic import INTERVAL_SECONDS_MIN, PeriodicTask
from ledgerflow.runtime.schedules import Scheduler, TickReport, schedules_task
from ledgerflow.runtime.seams import Runtime
from ledgerflow.runtime.store_thread import AsyncStore
from ledgerflow.runtime.unserved import (
    NO_WORKER_HINT,
    timed_out,
    unserved_task,
    why_unserved,
)
from ledgerflow.runtime.values import ValueCalls
from ledgerflow.runtime.within import CANCEL, AsyncWithin, Within
from ledgerflow.runtime.worker import Worker, new_worker_id
from ledgerflow.storage import open_store
from ledgerflow.storage.lent import lend
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.storage.sql_within import Identity, journal_identity
from ledgerflow.storage.store import Store

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ledgerflow.runtime.tracing import Tracing

__all__ = [
    "CancelRequested",
    "Delivered",
    "DeliveryOutcome",
    "Engine",
    "InstanceDetail",
    "SignalStarted",
    "Started",
    "instance_id_for",
]

RESULT_POLL_SECONDS_MIN = 0.01
RESULT_POLL_SECONDS_MAX = 0.5


class Engine(ValueCalls):
    """The asyncio front door.

    Example (a worker of this engine drives the instance; without one, start only records it)::

        async with Engine("sqlite:///orders.db", registry) as engine:
            running = asyncio.create_task(engine.worker().run())
            started = await engine.start("order", key="order-42", input={"sku": "A1"})
            result = await engine.result(started.instance_id, timeout=30)

    ``metrics`` (a :class:`~ledgerflow.runtime.metrics.Metrics`) counts what the engine and its
    workers do; ``tracing`` (the ``otel`` extra) sends spans to the global OpenTelemetry tracer
    provider when True, or to the provider given. Both are off by default and cost nothing
    then (``docs/observability.md``).
    """

    def __init__(
        self,
        store: Store | str,
        registry: Registry,
        *,
        codec: Codec = JSON,
        clock: Clock = SYSTEM_CLOCK,
        inline: bool = False,
        metrics: Metrics | None = None,
        tracing: bool | TracerProvider = False,
        no_worker_hint: str = NO_WORKER_HINT,
    ) -> None:
        # How a wait that timed out with no worker here says to run one (a face may say it in
        # its own terms).
        self.no_worker_hint = no_worker_hint
        # The whole store is opened here and each part is handed the view it needs: the core
        # and the workers the journal, the stuck-work scan its flags.
        self._store = open_store(store) if isinstance(store, str) else store
        self._core = EngineCore(self._store, registry, codec, metrics)
        self.registry = registry
        # What every part of the engine is handed, built once: the clock, the store thread
        # (inline: the store and blocking user code run on the loop's own thread; slow for a
        # service, it makes a simulation depend on nothing but its seed), the codec, metrics
        # (None: nothing is counted) and spans (the otel extra: True for the global tracer
        # provider, or the provider given).
        self.runtime = Runtime(
            clock=clock,
            store=AsyncStore(self._store, inline=inline, metrics=metrics),
            codec=codec,
            metrics=metrics,
            tracing=_tracing(tracing),
        )
        self.codec = codec
        self.clock = clock
        self.metrics = metrics
        self._workers: list[Worker] = []
        # The schedules' part of this engine's workers (built when first needed).
        self._scheduler: Scheduler | None = None
        # Result waiters by instance: a worker of this engine sets them when it lets an
        # instance go, so a result is seen at once; other processes' work is seen by polling.
        self._watchers: dict[str, set[asyncio.Event]] = {}
        # Instances started inside callers' transactions (engine.within) whose commit is not
        # proven yet, with the transaction: a read of one says whether it committed (bounded).
        self._uncommitted: OrderedDict[str, AsyncWithin] = OrderedDict()
        self._journal: Identity | None = None

    @property
    def store(self) -> Store:
        """The engine's whole store (its workers see only the journal part)."""
        return self._store

    @property
    def store_thread(self) -> AsyncStore:
        """The one thread this engine's store is used from (its workers' too): what shares the
        store in this process (the operators' service, a periodic task) runs its calls here."""
        return self.runtime.store

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the journal; ``async with Engine(...)`` does it on leaving."""
        await asyncio.to_thread(self.runtime.store.close)

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.runtime.store.call(method, *args, **kwargs)

    async def start(
        self, workflow: str | WorkflowFunction, **options: Unpack[StartOptions]
    ) -> Started:
        """Start ``workflow`` for a business key (``key=``, with ``input=``, and ``version=``
        and ``tenant=`` when not the newest and the default), or return the instance that key
        already started.

        ``start_at=`` (epoch seconds or an aware datetime) or ``start_in=`` (seconds) delays
        it: the instance exists at once, SCHEDULED, and may be read, signalled (its events wait
        for its run) and cancelled; no step runs before its time. ``if_running`` (``"return"``,
        ``"fail"``) and ``if_ended`` (``"return"``, ``"new_run"``, ``"new_run_if_failed"``,
        ``"fail"``) say what a start under a used key does; an instance is returned only to a
        start asking for its version and input, any other is refused with
        :class:`~ledgerflow.errors.KeyInUseError` (docs/programming-model.md, "Start options").
        ``debounce_seconds=`` (with ``debounce_max_seconds=``) debounces starts of the key: a
        start while its instance is still pending replaces the input and moves the start
        (``Started.debounced``; docs/programming-model.md, "Debounced starts")."""
        now = self.clock.now()
        real = self.runtime.store.database_clock and self.clock.real_time
        _, new = self._core.prepare(workflow, now=now, database_clock=real, **options)
        # A worker of this engine with a free slot takes the new instance in the start's own
        # transaction; concurrent starts share one transaction (group commit).
        worker, claim = next(
            ((w, c) for w in self._workers if (c := w.reserve()) is not None), (None, None)
        )
        record: InstanceRecord | None = None
        if faults.plan is not None:
            faults.point("start.before_commit", instance=new.business_key, kind="start")
        try:
            record, created = await self.runtime.store.start(new, claim, now=now)
        finally:
            if worker is not None and claim is not None:
                worker.adopt(record, claim)
        if faults.plan is not None:
            faults.point("start.after_commit", instance=new.business_key, kind="start")
        if worker is None:
            for other in self._workers:
                other.wake()
        return self._core.started(new, record, created=created)

    async def signal_with_start(
        self,
        workflow: str | WorkflowFunction,
        *,
        signal: str,
        event_id: str,
        payload: Any = None,
        sender: str | None = None,
        wake: bool = False,
        **options: Unpack[StartOptions],
    ) -> SignalStarted:
        """Start (or find, as :meth:`start` would, with the same options) the instance of a
        business key and deliver the event ``signal`` to it, in one transaction: both are
        durable, or neither (a start refused delivers nothing). Safe to repeat: the start
        returns the instance and the inbox keeps the event once per ``event_id``. A delayed
        instance keeps its delay unless ``wake`` ends it (then it is due now)."""
        now = self.clock.now()
        _, new = self._core.prepare(workflow, now=now, **options)
        if faults.plan is not None:
            faults.point("start.before_commit", instance=new.business_key, kind="signal_with_start")
        answer: SignalStarted = await self._call(
            self._core.signal_with_start,
            new,
            signal,
            now=now,
            event_id=event_id,
            payload=payload,
            sender=sender,
            wake=wake,
        )
        if faults.plan is not None:
            faults.point("start.after_commit", instance=new.business_key, kind="signal_with_start")
        self.notice_delivery(answer.delivered)
        return answer

    async def get(self, instance_id: str) -> InstanceRecord:
        """The instance's record now; InstanceNotFoundError when there is none
        (NotCommittedError when a caller's transaction this engine wrote in started it and
        has not committed)."""
        record = await self.runtime.store.get(InstanceId(instance_id))
        tx = self._uncommitted.get(instance_id) if record is None else None
        if tx is not None:
            await tx.refuse_unless_committed(instance_id)
            self._uncommitted.pop(instance_id, None)  # committed since the read
            record = await self.runtime.store.get(InstanceId(instance_id))
        if record is None:
            raise InstanceNotFoundError(instance_id=instance_id)
        return record

    def within(
        self, connection: object, *, actor: str | None = None, role: str | None = None
    ) -> AsyncWithin:
        """Start, signal and cancel inside your own open transaction on ``connection``:
        a ``sqlite3`` connection to the journal file, a psycopg connection (sync or async)
        to the journal's database, or a SQLAlchemy ``Connection`` or ``Session`` over one.

        The engine's writes (each with its audit record, under ``actor``) run in a savepoint
        of your transaction and commit or roll back with it; the engine never commits or
        retries (:class:`~ledgerflow.errors.RetryTransactionError` asks you to run your
        transaction again). After your COMMIT, ``await tx.committed()`` wakes this engine's
        workers; until then the instance is invisible elsewhere, and this engine's reads of
        it raise :class:`~ledgerflow.errors.NotCommittedError`. A connection to another
        database, file, or with files ATTACHed is refused
        (:class:`~ledgerflow.errors.ForeignConnectionError`).

        Example::

            with conn:  # a sqlite3 connection to the journal file: commits on leaving
                conn.execute("INSERT INTO orders (id) VALUES ('o-42')")
                tx = engine.within(conn, actor="service:orders")
                await tx.start("order", key="o-42", input={"sku": "A1"})
            await tx.committed()
        """
        store = self._store
        if not isinstance(store, SqlStore):
            raise ConfigurationError("within needs the engine's store to be a SQL journal")
        lent = lend(connection, path=str(getattr(store, "path", store.url)))
        sync = Within(
            store=store,
            lent=lent,
            registry=self.registry,
            codec=self.codec,
            clock=self.clock,
            actor=actor,
            role=role,
            metrics=self.metrics,
        )
        return AsyncWithin(
            sync,
            threaded=lent.asynchronous or lent.movable,
            on_store=self._call,
            identity=self._journal_identity,
            on_started=self._started_within,
            notice=self._committed,
        )

    def _started_within(self, instance_id: str, tx: AsyncWithin) -> None:
        self._uncommitted[instance_id] = tx
        self._uncommitted.move_to_end(instance_id)
        while len(self._uncommitted) > limits.WITHIN_UNCOMMITTED_MAX:
            self._uncommitted.popitem(last=False)

    async def _journal_identity(self) -> Identity:
        if self._journal is None:
            self._journal = await self._call(journal_identity, self._store)
        return self._journal

    def _committed(self, within: Within) -> None:
        """A caller's transaction committed what it wrote: the workers here hear of it now."""
        for instance_id in within.started():
            self._uncommitted.pop(instance_id, None)
        for written in within.written:
            if written.kind == CANCEL:
                self.notice_cancel(written.instance_id)
        for worker in self._workers:
            worker.wake()

    async def signal(
        self, instance_id: str, name: str, **event: Unpack[SignalOptions]
    ) -> Delivered:
        """Deliver a signal, callback or approval to an instance; safe to repeat.

        The event is kept in the instance's inbox, deduplicated by ``event_id``. A waiting
        instance is woken; an event that arrives before its wait is taken by it later. An event
        for a closed step (``for_step``), an older ``run`` or an ended instance is kept as
        refused and changes nothing; so is a decision from someone an open approval does not
        allow. The outcome says which. A name starting ``complete:`` is refused with
        :class:`~ledgerflow.errors.ReservedNameError`: an asynchronous effect's completion is
        delivered under it, by :meth:`complete_effect` only.
        """
        delivered: Delivered = await self._call(
            self._core.signal, instance_id, name, now=self.clock.now(), **event
        )
        self.notice_delivery(delivered)
        return delivered

    async def delivery(self, instance_id: str, event_id: str) -> Delivery:
        """What became of an event sent to the instance, by its id: still PENDING for a
        wait, CONSUMED by one, or REJECTED with the reason (an event no wait took before the
        instance ended is refused then, never left pending)."""
        found: Delivery = await self._call(self._core.delivery, instance_id, event_id)
        return found

    async def complete_effect(
        self, idempotency_key: str, **callback: Unpack[CompletionOptions]
    ) -> Delivered:
        """Complete an asynchronous effect: the participant's callback, by the effect's key.

        ``applied=True`` confirms it with ``evidence``; ``applied=False`` says it was not
        applied. Repeating a callback (same ``event_id``, by default derived from the key) is a
        no-op; a callback after the effect's step closed is kept as late and changes nothing.
        """
        delivered: Delivered = await self._call(
            self._core.complete_effect, idempotency_key, now=self.clock.now(), **callback
        )
        self.notice_delivery(delivered)
        return delivered

    def notice_delivery(self, delivered: Delivered) -> None:
        """Tell this engine's workers of an event delivered to the journal through another
        front door on this engine's store (the operators' service): a waiting instance they
        drive is woken now rather than at their next poll. Call it on the engine's loop."""
        if self.metrics is not None:
            self.metrics.delivered(delivered.outcome.value)
        for worker in self._workers:
            worker.wake()

    def notice_cancel(self, instance_id: InstanceId) -> None:
        """As :meth:`notice_delivery`, for a cancel request: a worker of this engine that
        drives the instance stops before its next step at once; one elsewhere learns it at
        its next heartbeat, or when its next effect, wait or timer is refused by the store."""
        for worker in self._workers:
            worker.cancel_requested(instance_id)
            worker.wake()

    async def set_concurrency_limit(
        self,
        *,
        workflow: str | None = None,
        tenant: str | None = None,
        in_flight_max: int | None,
    ) -> None:
        """Allow at most ``in_flight_max`` instances of a workflow (or of a tenant) to be driven
        at once, across every worker on this store; ``None`` removes the limit. The limit is
        data in the store, enforced by the claim itself."""
        await self._call(
            self._core.set_concurrency_limit,
            workflow=workflow,
            tenant=tenant,
            in_flight_max=in_flight_max,
        )

    async def limit_effect(
        self, participant: str, operation: str, **bounds: Any
    ) -> FlowLimit | None:
        """Limit one participant's operation across every worker: ``concurrency_max``,
        ``rate_per_second`` with ``burst`` (a GCRA), counted ``per`` 'tenant', 'input.<path>'
        or for all (None); no bounds removes the limit. See docs/programming-model.md."""
        limit: FlowLimit | None = await self._call(
            self._core.limit_effect, participant, operation, **bounds
        )
        return limit

    async def cancel(
        self, instance_id: str, *, reason: str, compensate: bool = True
    ) -> InstanceRecord:
        """Ask for an instance to be cancelled; durable and idempotent.

        Once this returns, no new effect, wait or timer of the instance starts (the store
        refuses to record one). The owner finishes what was started, runs the compensations of
        the confirmed effects when ``compensate`` (and no pivot forbids it), and ends CANCELLED
        with the residual effects that stay applied. A workflow that completes before it
        reaches another effect, wait or timer (its last step was running) ends as it would
        have: the request is overtaken. Either way ``cancel_outcome`` on the instance says
        which ("honoured" or "overtaken") once it has ended.
        """
        requested: CancelRequested = await self._call(
            self._core.cancel,
            instance_id,
            reason=reason,
            compensate=compensate,
            now=self.clock.now(),
        )
        record = requested.instance
        self.notice_cancel(record.instance_id)
        return record

    async def wait(self, instance_id: str, *, timeout: float) -> InstanceRecord:
        """Wait until the instance is terminal (from this or any other process)."""
        deadline = time.monotonic() + timeout
        # With a worker here, its release wakes this wait: polling is only for the case that
        # another process drives the instance, so it need not start fast.
        pause = RESULT_POLL_SECONDS_MAX if self._workers else RESULT_POLL_SECONDS_MIN
        released = asyncio.Event()
        watchers = self._watchers.setdefault(instance_id, set())
        watchers.add(released)
        # While a worker here drives it, reading is pointless until it lets go (the watcher
        # is registered first, so a release from now on is not missed).
        look = not any(worker.drives(instance_id) for worker in self._workers)
        try:
            while True:
                # Cleared before the read: a release during the read is not missed.
                released.clear()
                if look:
                    record = await self.get(instance_id)
                    try:
                        if self._core.settled(record, deadline=deadline, timeout=timeout):
                            return record
                    except ResultTimeoutError as error:
                        why = await self._call(why_unserved, self._store, record)
                        raise timed_out(
                            error, why=why, workers=bool(self._workers), hint=self.no_worker_hint
                        ) from None
                look = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(released.wait(), timeout=pause)
                pause = min(pause * 2, RESULT_POLL_SECONDS_MAX)
        finally:
            watchers.discard(released)
            if not watchers:
                self._watchers.pop(instance_id, None)

    def _schedules(self) -> Scheduler:
        scheduler = self._scheduler
        if scheduler is None:
            scheduler = self._scheduler = Scheduler(
                runtime=self.runtime, registry=self.registry, journal=self.store,
                on_fired=self._wake,
            )  # fmt: skip
        return scheduler

    async def tick_schedules(self) -> TickReport:
        """Decide the due slots of the journal's schedules now, as every worker of an engine
        whose registry declares schedules does each second: keep the declared specs on the
        journal, then, per batch of due schedules, one transaction that records each due slot
        and starts the fired ones (see ``docs/programming-model.md#schedules``)."""
        return await self._schedules().tick()

    def _wake(self) -> None:
        """A schedule started instances: this engine's workers look for them now."""
        for worker in self._workers:
            worker.wake()

    def _released(self, instance_id: InstanceId) -> None:
        for released in self._watchers.get(instance_id, ()):
            released.set()

    async def result(self, instance_id: str, *, timeout: float = 60.0) -> Any:
        """The workflow's return value; :class:`WorkflowError` if it ended otherwise."""
        return self._core.outcome(await self.wait(instance_id, timeout=timeout))

    async def list(self, **which: Unpack[ListOptions]) -> list[InstanceRecord]:
        """Instances, newest first, at most ``limit`` (100), filtered by ``status``,
        ``workflow`` name and ``tenant``."""
        records: list[InstanceRecord] = await self._call(self._core.list, **which)
        return records

    async def detail(self, instance_id: str) -> InstanceDetail:
        """Everything the ledgers hold about an instance: its record, steps, effects, inbox and
        timeline."""
        return await asyncio.to_thread(detail_of, self.store, instance_id)

    def worker(
        self,
        *,
        concurrency: int = limits.WORKER_CONCURRENCY_DEFAULT,
        lease_seconds: float = limits.LEASE_SECONDS_DEFAULT,
        poll_seconds: float = limits.POLL_SECONDS_DEFAULT,
        detection: DetectionBounds | None = None,
        periodic: Sequence[PeriodicTask] = (),
        schedules: bool = True,
    ) -> Worker:
        """A worker on this engine's store; ``detection`` bounds stuck and poison work (default:
        ``LEDGERFLOW_DETECTION``, else :class:`~ledgerflow.model.detection.DetectionBounds`).
        It ticks the registry's schedules each second unless ``schedules=False`` (then
        :meth:`tick_schedules` is the caller's to call, or another worker's to do).

        The worker runs the stuck-work scan periodically, and the ``periodic`` tasks given
        (reconciliation, see :func:`ledgerflow.operators.reconcile.reconcile_task`) beside it.
        It adopts in-flight instances of its workflows' versions pinned to code no live worker
        serves, each after a clean replay of its journal (``on_new_code``, see
        ``docs/versioning.md``).
        """
        worker_id = new_worker_id()
        bounds = detection or bounds_from_environment()
        runtime = self.runtime
        scan = detection_task(runtime, self.store, bounds, detected_by=f"scan:{worker_id}")
        if self.metrics is not None:
            periodic = (*periodic, signals_task(runtime.store, self.store, self.metrics))
        periodic = (*periodic, unserved_task(runtime, self.store, bounds))
        if schedules and self.registry.schedules:
            periodic = (*periodic, schedules_task(self._schedules()))
        adopter = Adopter(
            runtime=runtime,
            registry=self.registry,
            flags=self.store,
            owner=worker_id,
            bounds=bounds,
        )
        worker = Worker(
            runtime=runtime,
            registry=self.registry,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds,
            worker_id=worker_id,
            detection=bounds,
            on_released=self._released,
            periodic=(scan, *periodic),
            adopter=adopter,
            # Pushes only on real time: a simulated worker wakes when its script says.
            wakeups=(
                self._store.wake_source()
                if isinstance(self._store, SqlStore) and self.clock.real_time
                else None
            ),
        )
        self._workers.append(worker)
        return worker


def _tracing(wanted: bool | TracerProvider) -> Tracing | None:
    """The engine's tracing; only asking for it imports OpenTelemetry (the otel extra)."""
    if wanted is False:
        return None
    require_extra("otel", purpose="tracing")
    from ledgerflow.runtime.tracing import Tracing

    return Tracing(None if wanted is True else wanted)


def signals_task(thread: AsyncStore, store: Store, metrics: Metrics) -> PeriodicTask:
    """The worker's periodic read of the journal's gauges (parked, flagged, UNKNOWN open)."""

    async def run() -> None:
        if metrics.signals_due():
            signals = await thread.call(store.consistency_signals)
            metrics.signals(signals, now=time.time())

    return PeriodicTask(
        name="metrics-signals",
        interval_seconds=max(metrics.signals_seconds, INTERVAL_SECONDS_MIN),
        run=run,
    )
