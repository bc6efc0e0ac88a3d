"""Start, signal and cancel inside the caller's own transaction (internal: reached through
``Engine.within`` and ``SyncEngine.within``).

A service that keeps its rows in the journal's database writes "order row inserted" and "order
workflow started" in one transaction: they commit together or not at all, the dual write the
seeds forbid is closed. The engine's writes are the ones its own start, signal and cancel make
(the same rules, :class:`~ledgerflow.runtime.core.EngineCore`, on the store's kernel lent the
caller's connection, :mod:`ledgerflow.storage.sql_within`), each with its audit record, in one
SAVEPOINT of the caller's transaction per call. The engine never commits, never rolls back the
caller's work and never retries inside it: a conflict the caller's snapshot cannot read past is
:class:`~ledgerflow.errors.RetryTransactionError`, for the caller to run the transaction again.

Until the caller commits nobody else sees any of it, and this engine's workers are not told:
``committed()`` (after the COMMIT) proves the commit -- the audit record of the last write is
visible through the store's own connection -- and, on :class:`AsyncWithin`, wakes them;
workers elsewhere find the work at their next poll. Asked before, the engine answers
:class:`~ledgerflow.errors.NotCommittedError` (``open``, or ``rolled-back``) for an instance
its ``within`` started, never a plain "not found".

Example (SQLite; the service's own table lives in the journal file)::

    conn = sqlite3.connect("shop.db")
    async with Engine("sqlite:///shop.db", registry) as engine:
        with conn:  # sqlite3: commits on leaving, rolls back on an error
            conn.execute("INSERT INTO orders (id) VALUES ('o-42')")
            tx = engine.within(conn, actor="service:orders")
            await tx.start("order", key="o-42", input={"sku": "A1"})
        await tx.committed()  # committed: this engine's workers take it now
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from ledgerflow.errors import (
    ConfigurationError,
    InstanceNotFoundError,
    NotCommittedError,
    RetryTransactionError,
)
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.model.codec import Codec
from ledgerflow.model.definition import Registry, WorkflowFunction
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.core import (
    Delivered,
    DeliveryOutcome,
    EngineCore,
    SignalOptions,
    Started,
    StartOptions,
)
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.storage.lent import Lent
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.storage.sql_within import Identity, WithinStore, audit_visible, borrow

__all__ = ["AsyncWithin", "Within", "WithinState"]

# The audit kinds of these changes: the operators' words for the same changes.
START, SIGNAL, CANCEL = "start", "signal", "cancel"
ACTOR_DEFAULT = "ledgerflow:within"
T = TypeVar("T")


class WithinState(enum.Enum):
    """Where the caller's transaction stands, as the engine can tell from outside it."""

    EMPTY = "empty"  # nothing was written through it
    OPEN = "open"  # written, not committed: the caller's transaction is still open
    COMMITTED = "committed"  # its writes are visible through the store's own connection
    ROLLED_BACK = "rolled-back"  # it ended without them


@dataclass(frozen=True, slots=True)
class _Written:
    kind: str
    instance_id: InstanceId
    audit_id: int
    fingerprint: str


class Within:
    """Start, signal and cancel inside the transaction open on a lent connection (blocking;
    :class:`AsyncWithin` is the asyncio face of the same).

    Each call is all or nothing, in its own savepoint; all of them commit when the caller
    commits and vanish when it rolls back. Made by :meth:`SyncEngine.within`.
    """

    def __init__(
        self,
        *,
        store: SqlStore,
        lent: Lent,
        registry: Registry,
        codec: Codec,
        clock: Clock,
        actor: str | None,
        role: str | None,
        metrics: Metrics | None = None,
        on_started: Callable[[str, Within], None] | None = None,
        on_committed: Callable[[Within], None] | None = None,
    ) -> None:
        self._store = store
        # Told of each instance this transaction created, and of its proven commit (a
        # SyncEngine's reads answer NotCommittedError in between).
        self._on_started, self._on_committed = on_started, on_committed
        self._lent = lent
        self._registry, self._codec = registry, codec
        self._clock = clock
        self.actor = (actor or "").strip() or ACTOR_DEFAULT
        self.role = role
        # One caller's transaction: its audit records carry this, so that a record read back
        # is this transaction's own (a rolled-back SQLite insert may hand its id to another).
        self._token = secrets.token_hex(8)
        self._kernel: WithinStore | None = None
        self._core: EngineCore | None = None
        self.written: list[_Written] = []
        # The instances this transaction created, counted in ``metrics`` as started once its
        # commit is proven (a start that may still roll back is no start), and only once.
        self._metrics = metrics
        self._uncounted: list[InstanceRecord] = []

    def ready(self, ours: Identity) -> None:
        """Prove the connection is to the store's own journal (``ours``: the store's marker,
        read through its own connection) before anything is written through it."""
        if self._kernel is None:
            kernel = borrow(self._store, self._lent, ours=ours)
            # Not counted in the engine's metrics (metrics=None): a start that may still roll
            # back is no start.
            self._core = EngineCore(kernel, self._registry, self._codec, None)
            self._kernel = kernel

    @property
    def proven(self) -> bool:
        """Whether the connection was proven to be to the store's own journal."""
        return self._kernel is not None

    def _parts(self) -> tuple[WithinStore, EngineCore]:
        if self._kernel is None or self._core is None:
            raise ConfigurationError("within: prove the connection first (ready)")
        return self._kernel, self._core

    def start(self, workflow: str | WorkflowFunction, **options: Unpack[StartOptions]) -> Started:
        """Start ``workflow`` for its business key in the caller's transaction, or return the
        instance that key started already (see :meth:`Engine.start`). A concurrent caller
        with the same key waits for this transaction to end (the key's unique index), then
        finds this instance, or starts its own if this one rolled back."""
        kernel, core = self._parts()
        definition, new = core.prepare(workflow, **options)
        now = self._clock.now()
        target = f"{definition.name}:{new.business_key}"
        arguments = {
            "workflow": definition.name,
            "key": new.business_key,
            "version": options.get("version"),
            "tenant": new.tenant,
        }
        with kernel.transaction():
            started = core.start(new, now=now)
            self._audit(
                START,
                started.instance_id,
                target,
                # A start debounced into the pending instance changed its input and time.
                outcome="applied" if started.created or started.debounced else "no-op",
                reason=f"start {definition.name} for key {new.business_key}",
                arguments=arguments,
                now=now,
            )
        if started.created:
            self._uncounted.append(started.instance)
            if self._on_started is not None:
                self._on_started(started.instance_id, self)
        return started

    def signal(self, instance_id: str, name: str, **event: Unpack[SignalOptions]) -> Delivered:
        """Deliver an event in the caller's transaction (see :meth:`Engine.signal`); the
        instance may be one this transaction started."""
        kernel, core = self._parts()
        now = self._clock.now()
        with self._snapshot_sees(instance_id), kernel.transaction():
            delivered = core.signal(instance_id, name, now=now, **event)
            delivery = delivered.delivery
            refused = (
                delivery.state is DeliveryState.REJECTED
                and delivered.outcome is not DeliveryOutcome.DUPLICATE
            )
            outcome = {DeliveryOutcome.ACCEPTED: "applied", DeliveryOutcome.DUPLICATE: "no-op"}
            self._audit(
                SIGNAL,
                delivery.instance_id,
                f"{delivery.name} {delivery.event_id}",
                outcome=outcome.get(delivered.outcome, "refused"),
                reason=f"signal {delivery.name}",
                arguments={
                    "name": name,
                    "event_id": event["event_id"],
                    "sender": event.get("sender"),
                },
                now=now,
                refusal=delivery.reason if refused else None,
            )
        return delivered

    def cancel(self, instance_id: str, *, reason: str, compensate: bool = True) -> InstanceRecord:
        """Ask for the instance's cancellation in the caller's transaction (see
        :meth:`Engine.cancel`); in force for its owner once the caller commits."""
        kernel, core = self._parts()
        now = self._clock.now()
        with self._snapshot_sees(instance_id), kernel.transaction():
            asked = core.cancel(instance_id, reason=reason, compensate=compensate, now=now)
            self._audit(
                CANCEL,
                asked.instance.instance_id,
                None,
                outcome="applied" if asked.recorded else "no-op",
                reason=reason,
                arguments={"compensate": compensate},
                now=now,
            )
        return asked.instance

    @contextlib.contextmanager
    def _snapshot_sees(self, instance_id: str) -> Iterator[None]:
        """An instance the caller's snapshot cannot see, but the store's own connection can
        (started and committed after that snapshot was taken, under REPEATABLE READ,
        SERIALIZABLE or a SQLite read transaction): not "not found", a retry."""
        try:
            yield
        except InstanceNotFoundError as exc:
            if exc.event_id is not None or exc.key is not None:
                raise
            if self._store.get_instance(InstanceId(instance_id)) is None:
                raise
            raise RetryTransactionError(
                f"instance {instance_id} exists, but your transaction's snapshot was taken "
                "before it committed; roll your transaction back and run it again",
                instance_id=instance_id,
            ) from None

    def _audit(
        self,
        kind: str,
        instance_id: InstanceId,
        target: str | None,
        *,
        outcome: str,
        reason: str,
        arguments: dict[str, Any],
        now: float,
        refusal: str | None = None,
    ) -> None:
        kernel, _ = self._parts()
        plan = json.dumps({**arguments, "within": self._token}, sort_keys=True, default=str)
        identity = json.dumps([kind, instance_id, target, plan], sort_keys=True)
        fingerprint = hashlib.sha256(identity.encode()).hexdigest()
        entry = AuditEntry(
            actor=self.actor,
            role=self.role,
            kind=kind,
            instance_id=instance_id,
            target=target,
            fingerprint=fingerprint,
            outcome=outcome,
            reason=(reason.strip() or "(none given)")[:1000],
            evidence="written in the caller's transaction",
            plan=plan,
            refusal=refusal[:1000] if refusal else None,
        )
        audit_id = kernel.append_audit(entry, now=now)
        self.written.append(_Written(kind, instance_id, audit_id, fingerprint))

    def visible(self, instance_id: str | None = None) -> bool | None:
        """Whether the last write (of ``instance_id``, when given) is visible through the
        store's own connection, which sees only what is committed; None when nothing was
        written (for it)."""
        last = next(
            (w for w in reversed(self.written) if instance_id in (None, w.instance_id)), None
        )
        if last is None:
            return None
        return audit_visible(self._store, last.audit_id, last.fingerprint)

    def state(self, visible: bool | None = None) -> WithinState:
        """Where the caller's transaction stands (``visible``: :meth:`visible`, read first on
        the store's thread; the lent connection is asked on the caller's). A lent connection
        rolled back and in a new transaction since reads as still ``open``: either way,
        nothing of it is committed."""
        if not self.written:
            return WithinState.EMPTY
        if visible is None:
            visible = self.visible()
        if visible:
            return WithinState.COMMITTED
        return WithinState.OPEN if self._lent.in_transaction() else WithinState.ROLLED_BACK

    def committed(self, visible: bool | None = None) -> None:
        """After the caller's COMMIT: prove it (NotCommittedError otherwise)."""
        self.refuse_unless_committed(None, visible)

    def refuse_unless_committed(self, instance_id: str | None, visible: bool | None) -> None:
        """NotCommittedError unless what was written here (for ``instance_id``) is committed."""
        state = self.state(visible)
        if state is WithinState.COMMITTED:
            self._count_started()
        if state in (WithinState.OPEN, WithinState.ROLLED_BACK):
            shown = instance_id or self.written[-1].instance_id
            raise NotCommittedError(
                f"written in a caller's transaction that {_how(state)}",
                instance_id=shown,
                state=state.value,
            )

    def _count_started(self) -> None:
        """Its commit is proven: the instances it created are started, for the metrics too."""
        if self._metrics is not None:
            for instance in self._uncounted:
                self._metrics.started(instance.workflow_name, instance.workflow_version)
        self._uncounted = []
        if self._on_committed is not None:
            self._on_committed(self)

    def started(self) -> set[str]:
        """The instances this transaction started (or found again by their key)."""
        return {w.instance_id for w in self.written if w.kind == START}


def _how(state: WithinState) -> str:
    if state is WithinState.OPEN:
        return "is still open: nobody else sees it until it commits"
    return "rolled back: it never existed"


StoreCall = Callable[..., Awaitable[Any]]


class AsyncWithin:
    """The asyncio face of :class:`Within`, made by :meth:`Engine.within`.

    Usable directly or as ``async with engine.within(conn) as tx:`` (leaving the block ends
    the borrowing: a later call is refused; it commits nothing). After the caller's COMMIT,
    ``await tx.committed()`` wakes this engine's workers at once.
    """

    def __init__(
        self,
        sync: Within,
        *,
        threaded: bool,
        on_store: StoreCall,
        identity: Callable[[], Awaitable[Identity]],
        on_started: Callable[[str, AsyncWithin], None],
        notice: Callable[[Within], None],
    ) -> None:
        self._sync = sync
        self._threaded = threaded
        self._on_store = on_store
        self._identity = identity
        self._on_started = on_started
        self._notice = notice
        self._closed = False

    async def __aenter__(self) -> Self:
        await self._ready()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True

    async def _ready(self) -> None:
        if self._closed:
            raise ConfigurationError("this within block has ended: open another one")
        if not self._sync.proven:
            ours = await self._identity()
            await self._run(self._sync.ready, ours)

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # On a thread of its own when the connection allows it: an async driver's statements
        # are awaited on this loop meanwhile, and a start waiting on another caller's key holds
        # up nobody's commit. A sqlite3 connection is used on the caller's own thread.
        if self._threaded:
            return await asyncio.to_thread(call, *args, **kwargs)
        return call(*args, **kwargs)

    async def start(
        self, workflow: str | WorkflowFunction, **options: Unpack[StartOptions]
    ) -> Started:
        """:meth:`Within.start`, awaited."""
        await self._ready()
        started = await self._run(self._sync.start, workflow, **options)
        if started.created:
            self._on_started(started.instance_id, self)
        return started

    async def signal(
        self, instance_id: str, name: str, **event: Unpack[SignalOptions]
    ) -> Delivered:
        """:meth:`Within.signal`, awaited."""
        await self._ready()
        return await self._run(self._sync.signal, instance_id, name, **event)

    async def cancel(
        self, instance_id: str, *, reason: str, compensate: bool = True
    ) -> InstanceRecord:
        """:meth:`Within.cancel`, awaited."""
        await self._ready()
        return await self._run(self._sync.cancel, instance_id, reason=reason, compensate=compensate)

    async def state(self) -> WithinState:
        """:meth:`Within.state`: committed, still open, or rolled back."""
        visible: bool | None = await self._on_store(self._sync.visible)
        return self._sync.state(visible)

    async def refuse_unless_committed(self, instance_id: str) -> None:
        """NotCommittedError for ``instance_id`` unless this transaction committed."""
        visible: bool | None = await self._on_store(self._sync.visible, instance_id)
        self._sync.refuse_unless_committed(instance_id, visible)

    async def committed(self) -> None:
        """After your COMMIT: prove it committed (:class:`~ledgerflow.errors.NotCommittedError`
        otherwise, with ``state``), and wake this engine's workers for what it wrote."""
        visible: bool | None = await self._on_store(self._sync.visible)
        self._sync.committed(visible)
        self._notice(self._sync)

    @property
    def sync(self) -> Within:
        """The blocking object this face drives."""
        return self._sync
