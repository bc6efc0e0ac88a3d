"""The synchronous front door: what :class:`~ledgerflow.runtime.engine.Engine` does, for code
that does not run an event loop (scripts, web handlers, the CLI). It drives nothing itself: a
worker elsewhere moves the instances it starts.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from types import TracebackType
from typing import Any, Self, Unpack

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError, InstanceNotFoundError, ResultTimeoutError
from ledgerflow.ledger.records import Delivery, InstanceRecord
from ledgerflow.ledger.values import NotPublished, Published
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry, WorkflowFunction
from ledgerflow.model.flow import FlowLimit
from ledgerflow.runtime import values
from ledgerflow.runtime.clock import SYSTEM_CLOCK
from ledgerflow.runtime.core import (
    CancelRequested,
    CompletionOptions,
    Delivered,
    EngineCore,
    InstanceDetail,
    ListOptions,
    SignalOptions,
    SignalStarted,
    Started,
    StartOptions,
    detail_of,
)
from ledgerflow.runtime.engine import RESULT_POLL_SECONDS_MAX, RESULT_POLL_SECONDS_MIN
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.runtime.unserved import NO_WORKER_HINT_SYNC, timed_out, why_unserved
from ledgerflow.runtime.within import Within
from ledgerflow.storage import open_store
from ledgerflow.storage.lent import lend
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.storage.sql_within import journal_identity
from ledgerflow.storage.store import Store

__all__ = ["SyncEngine"]


class SyncEngine:
    """The same front door for synchronous code (scripts, web handlers, the CLI).

    Example::

        engine = SyncEngine("sqlite:///orders.db", registry)
        started = engine.start("order", key="order-42", input={"sku": "A1"})
        print(engine.result(started.instance_id, timeout=30))
    """

    def __init__(
        self,
        store: Store | str,
        registry: Registry,
        *,
        codec: Codec = JSON,
        metrics: Metrics | None = None,
        no_worker_hint: str = NO_WORKER_HINT_SYNC,
    ) -> None:
        self.store = open_store(store) if isinstance(store, str) else store
        # How a wait that timed out says to run a worker (a face may say it in its own terms).
        self.no_worker_hint = no_worker_hint
        self._core = EngineCore(self.store, registry, codec, metrics)
        self.registry = registry
        self.codec = codec
        # Starts and deliveries are counted here (the operators' service, ``serve``).
        self.metrics = metrics
        # Instances started inside callers' transactions (within) whose commit is not proven
        # yet: get and result answer NotCommittedError for them rather than "not found".
        self._uncommitted: OrderedDict[str, Within] = OrderedDict()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the journal; ``with SyncEngine(...)`` does it on leaving."""
        self.store.close()

    def start(self, workflow: str | WorkflowFunction, **options: Unpack[StartOptions]) -> Started:
        """Start ``workflow`` for business key ``key``, or return the instance that key already
        started (see :meth:`Engine.start`, debounced starts included)."""
        now = time.time()
        real = self.store.database_clock
        _, new = self._core.prepare(workflow, now=now, database_clock=real, **options)
        return self._core.start(new, now=now)

    def signal_with_start(
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
        """Start (or find) the instance and deliver the event in one transaction (see
        :meth:`Engine.signal_with_start`)."""
        now = time.time()
        _, new = self._core.prepare(workflow, now=now, **options)
        return self._core.signal_with_start(
            new, signal, now=now, event_id=event_id, payload=payload, sender=sender, wake=wake
        )

    def get(self, instance_id: str) -> InstanceRecord:
        """The instance's record now; InstanceNotFoundError when there is none
        (NotCommittedError when a caller's transaction this engine wrote in started it and
        has not committed, as :meth:`Engine.get`)."""
        try:
            return self._core.get(instance_id)
        except InstanceNotFoundError:
            tx = self._uncommitted.get(instance_id)
            if tx is None:
                raise
            tx.refuse_unless_committed(instance_id, None)
            self._uncommitted.pop(instance_id, None)  # committed since the read
            return self._core.get(instance_id)

    def within(
        self, connection: object, *, actor: str | None = None, role: str | None = None
    ) -> Within:
        """Start, signal and cancel inside your own open transaction on ``connection`` (a
        ``sqlite3`` or psycopg connection to the journal's database, or a SQLAlchemy
        ``Connection`` or ``Session`` over one); see :meth:`Engine.within`. After your
        COMMIT, ``tx.committed()`` proves it (a worker elsewhere takes the work at its next
        poll)."""
        store = self.store
        if not isinstance(store, SqlStore):
            raise ConfigurationError("within needs the engine's store to be a SQL journal")
        lent = lend(connection, path=str(getattr(store, "path", store.url)))
        if lent.asynchronous:
            raise ConfigurationError(
                "an async connection is lent to Engine.within, not SyncEngine.within"
            )
        within = Within(
            store=store,
            lent=lent,
            registry=self.registry,
            codec=self._core.codec,
            clock=SYSTEM_CLOCK,
            actor=actor,
            role=role,
            metrics=self.metrics,
            on_started=self._started_within,
            on_committed=self._committed_within,
        )
        within.ready(journal_identity(store))
        return within

    def _started_within(self, instance_id: str, tx: Within) -> None:
        self._uncommitted[instance_id] = tx
        self._uncommitted.move_to_end(instance_id)
        while len(self._uncommitted) > limits.WITHIN_UNCOMMITTED_MAX:
            self._uncommitted.popitem(last=False)

    def _committed_within(self, tx: Within) -> None:
        for instance_id in tx.started():
            self._uncommitted.pop(instance_id, None)

    def signal(self, instance_id: str, name: str, **event: Unpack[SignalOptions]) -> Delivered:
        """Deliver a signal, callback or approval to an instance; safe to repeat with the same
        ``event_id`` (see :meth:`Engine.signal`)."""
        return self._counted(self._core.signal(instance_id, name, now=time.time(), **event))

    def read(self, instance_id: str, name: str) -> Published | NotPublished:
        """The value the instance last published under ``name`` (see :meth:`Engine.read`)."""
        return values.read_value(self._core, instance_id, name)

    def request_update(
        self, record: InstanceRecord, name: str, payload: Any, *, update_id: str
    ) -> Delivered:
        """Store an update request after its validator (see :meth:`Engine.update`); the
        reply is read with :func:`~ledgerflow.runtime.values.reply_of`."""
        return values.request_update(
            self._core, record, name, payload, update_id=update_id, now=time.time()
        )

    def _counted(self, delivered: Delivered) -> Delivered:
        if self.metrics is not None:
            self.metrics.delivered(delivered.outcome.value)
        return delivered

    def delivery(self, instance_id: str, event_id: str) -> Delivery:
        """What became of the event ``event_id`` delivered to the instance (kept, taken or refused,
        and why)."""
        return self._core.delivery(instance_id, event_id)

    def complete_effect(
        self, idempotency_key: str, **callback: Unpack[CompletionOptions]
    ) -> Delivered:
        """Complete an asynchronous effect (``completes_by_callback=``) by its idempotency key,
        applied or not (see :meth:`Engine.complete_effect`)."""
        return self._counted(
            self._core.complete_effect(idempotency_key, now=time.time(), **callback)
        )

    def set_concurrency_limit(
        self,
        *,
        workflow: str | None = None,
        tenant: str | None = None,
        in_flight_max: int | None,
    ) -> None:
        """Hold the instances in flight of a workflow or a tenant to ``in_flight_max`` across every
        worker (``None`` lifts the limit)."""
        self._core.set_concurrency_limit(
            workflow=workflow, tenant=tenant, in_flight_max=in_flight_max
        )

    def limit_effect(self, participant: str, operation: str, **bounds: Any) -> FlowLimit | None:
        """Limit one participant's operation across every worker (see Engine.limit_effect)."""
        return self._core.limit_effect(participant, operation, **bounds)

    def cancel(self, instance_id: str, *, reason: str, compensate: bool = True) -> InstanceRecord:
        """Request the instance's cancellation and return its record; durable and idempotent (see
        :meth:`Engine.cancel`)."""
        return self.request_cancel(instance_id, reason=reason, compensate=compensate).instance

    def request_cancel(
        self, instance_id: str, *, reason: str, compensate: bool = True
    ) -> CancelRequested:
        """:meth:`cancel`, answering also whether this call recorded the request or one
        stood already (as the store decided it, in the request's transaction)."""
        return self._core.cancel(instance_id, reason=reason, compensate=compensate, now=time.time())

    def wait(self, instance_id: str, *, timeout: float) -> InstanceRecord:
        """Wait up to ``timeout`` seconds for the instance to end or park; its record then. A
        worker elsewhere must run it."""
        deadline = time.monotonic() + timeout
        pause = RESULT_POLL_SECONDS_MIN
        while True:
            record = self.get(instance_id)
            # A synchronous engine drives nothing itself: only a worker elsewhere moves it.
            try:
                if self._core.settled(record, deadline=deadline, timeout=timeout):
                    return record
            except ResultTimeoutError as error:
                why = why_unserved(self.store, record)
                raise timed_out(error, why=why, workers=False, hint=self.no_worker_hint) from None
            time.sleep(pause)
            pause = min(pause * 2, RESULT_POLL_SECONDS_MAX)

    def result(self, instance_id: str, *, timeout: float = 60.0) -> Any:
        """The instance's result once it succeeded; WorkflowError with the cause when it ended
        otherwise, ResultTimeoutError after ``timeout``."""
        return self._core.outcome(self.wait(instance_id, timeout=timeout))

    def list(self, **which: Unpack[ListOptions]) -> list[InstanceRecord]:
        """Instances, newest first, at most ``limit`` (100), filtered by ``status``,
        ``workflow`` name and ``tenant``."""
        return self._core.list(**which)

    def detail(self, instance_id: str) -> InstanceDetail:
        """Everything the ledgers hold about an instance: its record, steps, effects, inbox and
        timeline."""
        return detail_of(self.store, instance_id)
