"""The store thread: runs a synchronous store on one dedicated thread, for the loop (internal).

One thread per store keeps driver objects off the loop and serialises access to the
connection; every call returns only after the store call (and so any commit) is done.

Group commit: :meth:`AsyncStore.commit` queues one instance's commit and waits. The store
thread takes every commit queued when it gets to them (at most ``GROUP_COMMIT_BATCH_MAX``) and
applies them in one durable transaction, each in its own savepoint, so that many instances'
steps share one fsync. Nothing waits on purpose to fill a batch: commits gather while the
previous transaction is being made durable, so the added latency is bounded by one transaction
of at most ``GROUP_COMMIT_BATCH_MAX`` commits. A commit's caller is answered only after the
whole transaction is durable (or failed): no step is acknowledged before it is on disk.

An embedded store (SQLite) takes a shortcut when there is nothing to share: a lone commit,
start or read, with the store thread idle and nothing else ready on the loop, is applied on
the loop's own thread (see :class:`_Group`). The transaction and its durability are the same;
only the two thread wake-ups are saved.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ledgerflow import limits
from ledgerflow.ledger.records import (
    Commit,
    InstanceRecord,
    Journal,
    NewInstance,
    StartClaim,
)
from ledgerflow.ledger.transaction import Transaction
from ledgerflow.model.ids import InstanceId, RunNumber
from ledgerflow.runtime import faults
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.storage.store import JournalStore

# A start's answer: the instance and whether this start created it, or the start's error.
StartOutcome = tuple[InstanceRecord, bool] | Exception

T = TypeVar("T")
ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
P = ParamSpec("P")
R = TypeVar("R")


def _loop_has_nothing_else(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no other callback is ready to run on the loop now.

    asyncio offers no public way to ask; CPython's loop keeps its ready callbacks in
    ``_ready``. Any other loop (uvloop) answers False, so its calls always go to the store
    thread, as they did before this was asked.
    """
    ready = getattr(loop, "_ready", None)
    return ready is not None and len(ready) == 0


class _StoreThread:
    """The one thread that runs a store's calls, and what the loop knows of it."""

    def __init__(self, *, embedded: bool) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ledgerflow-store"
        )
        # Whether a lone call may run on the loop's thread instead (see _Group).
        self.embedded = embedded
        # Calls handed to the thread and not yet answered (touched on the loop's thread only).
        self.calls = 0


class _Group(Generic[ItemT, ResultT]):
    """Calls that the store thread answers many at a time, in one transaction.

    Items are queued on the loop's thread; the store thread takes every item queued when it
    gets to them (at most ``batch_max``), so nothing waits on purpose to fill a batch. A
    caller is answered after the whole transaction is done, or gets its failure.

    With an embedded store, a lone item is applied on the loop's own thread when the loop has
    nothing else to run and the store thread is idle: handing it over would only add two
    thread wake-ups to its latency (one after another, a third of a workflow's time), and
    nothing could run meanwhile anyway. The decision is made one loop turn after the first
    item arrives, so items queued by the other tasks of that turn still share a transaction;
    or at once, when nothing else is ready on the loop (no other task can run, and so queue an
    item, before the loop next polls), which also saves the caller its wake-up.
    """

    def __init__(
        self,
        thread: _StoreThread,
        apply: Callable[[list[ItemT]], list[ResultT]],
        *,
        batch_max: int,
        point: str,
    ) -> None:
        self._thread = thread
        self._apply = apply
        self._batch_max = batch_max
        self._point = point
        # Appended on the loop's thread, taken on the store thread: hence the lock.
        self._queue: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        self._lock = threading.Lock()
        # Touched on the loop's thread only: True while a flush is decided, submitted or running.
        self._flushing = False
        # Batches done so far; a fault rule can name one (``group`` in ``where``).
        self.groups = 0

    async def submit(self, item: ItemT) -> ResultT:
        loop = asyncio.get_running_loop()
        if self._alone_now(loop):
            # Nothing else can run before the loop next polls, so no other item can join this
            # one: deciding a turn later would decide the same. Apply it here and now.
            outcome = self._run([item])
            # Still one turn of the loop per call, so that a workflow of many trivial steps
            # never keeps timers and other tasks (heartbeats, a server) from running.
            await asyncio.sleep(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome[0]
        future: asyncio.Future[ResultT] = loop.create_future()
        with self._lock:
            self._queue.append((item, future))
        if not self._flushing:
            self._flushing = True
            if self._thread.embedded:
                loop.call_soon(self._decide, loop)
            else:
                self._submit_flush(loop)
        return await future

    def _alone_now(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a new item would be applied alone on the loop's thread at once."""
        return (
            self._thread.embedded
            and not self._flushing  # so nothing is queued either
            and self._thread.calls == 0
            and _loop_has_nothing_else(loop)
        )

    def _decide(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop's thread, a turn after the first item: apply here or hand over."""
        with self._lock:
            alone = len(self._queue) == 1
        if alone and self._thread.calls == 0 and _loop_has_nothing_else(loop):
            batch = self._take()
            self._answer(loop, batch, self._run([item for item, _ in batch]), handed_over=False)
        else:
            self._submit_flush(loop)

    def _submit_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        # Queued behind the store calls already submitted: reads and claims are not starved
        # by a stream of commits.
        self._thread.calls += 1
        self._thread.executor.submit(self._flush, loop)

    def _take(self) -> list[tuple[ItemT, asyncio.Future[ResultT]]]:
        with self._lock:
            batch = self._queue[: self._batch_max]
            del self._queue[: len(batch)]
        return batch

    def _run(self, items: list[ItemT]) -> list[ResultT] | BaseException:
        """One transaction for the items: their results, or the failure every caller gets."""
        try:
            self.groups += 1
            where = {"group": self.groups, "size": len(items)}
            if faults.plan is not None:
                faults.point(f"{self._point}.before_group", **where)
            outcome = self._apply(items)
            if faults.plan is not None:
                faults.point(f"{self._point}.after_group", **where)
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter, not lost.
            return exc
        return outcome

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the store thread: one transaction for the items queued so far."""
        batch = self._take()
        outcome = self._run([item for item, _ in batch])
        # A closed loop has nobody left waiting for these answers.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._answer, loop, batch, outcome, True)

    def _answer(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[tuple[ItemT, asyncio.Future[ResultT]]],
        outcome: list[ResultT] | BaseException,
        handed_over: bool,
    ) -> None:
        """On the loop's thread: answer the batch's waiters, then flush what queued meanwhile."""
        if handed_over:
            self._thread.calls -= 1
        for index, (_, future) in enumerate(batch):
            if future.done():
                continue  # Its waiter was cancelled; the transaction stands all the same.
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome[index])
        with self._lock:
            more = bool(self._queue)
        if more:
            self._submit_flush(loop)
        else:
            self._flushing = False


class _OnStoreThread(Generic[P, R]):
    """An :class:`AsyncStore` method that runs the store's method of the same name, with the
    same arguments, on the store's thread: the store's declaration is the only one, so a new
    store call the runtime needs is one line here, typed from the store's own signature."""

    def __init__(self, method: Callable[Concatenate[Any, P], R]) -> None:
        self.name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, owner: None, kind: type[Any]) -> _OnStoreThread[P, R]: ...

    @overload
    def __get__(
        self, owner: AsyncStore, kind: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, owner: AsyncStore | None, kind: type[Any] | None = None
    ) -> _OnStoreThread[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if owner is None:
            return self
        method: Callable[P, R] = getattr(owner._store, self.name)
        thread = owner

        async def on_store_thread(*args: P.args, **kwargs: P.kwargs) -> R:
            return await thread.call(method, *args, **kwargs)

        return on_store_thread


class AsyncStore:
    """The journal store, for the event loop: every call the runtime makes on its store, typed,
    run on the store's one thread (reads and commits many at a time where they can be).

    ``inline=True`` runs store calls on the event loop's own thread: slower for a service,
    but it makes a simulation's interleaving depend on nothing but its seed. :meth:`call` runs
    any other synchronous function of the store's on the same thread.
    """

    def __init__(
        self, store: JournalStore, *, inline: bool = False, metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self.inline = inline
        # Group commits' sizes and latencies are reported here (None: not measured).
        self.metrics = metrics
        self._thread = _StoreThread(embedded=store.embedded)
        self._commits: _Group[tuple[Commit | Transaction, float], Exception | None] = _Group(
            self._thread,
            self._commit_group,
            batch_max=limits.GROUP_COMMIT_BATCH_MAX,
            point="commit",
        )
        self._starts: _Group[tuple[NewInstance, StartClaim | None, float], StartOutcome] = _Group(
            self._thread,
            self._start_group,
            batch_max=limits.GROUP_COMMIT_BATCH_MAX,
            point="start",
        )
        self._gets: _Group[InstanceId, InstanceRecord | None] = _Group(
            self._thread, self._get_group, batch_max=limits.READ_BATCH_MAX, point="read"
        )
        self._journals: _Group[tuple[InstanceId, RunNumber], Journal] = _Group(
            self._thread,
            self._journal_group,
            batch_max=limits.READ_BATCH_MAX,
            point="journal",
        )

    async def get(self, instance_id: InstanceId) -> InstanceRecord | None:
        """Read one instance, in one read with the other reads queued (result waiters)."""
        if self.inline:
            return self._store.get_instance(instance_id)
        return await self._gets.submit(instance_id)

    def _get_group(self, batch: list[InstanceId]) -> list[InstanceRecord | None]:
        found = self._store.get_instances(batch)
        return [found.get(instance_id) for instance_id in batch]

    async def journal(self, instance_id: InstanceId, run: RunNumber) -> Journal:
        """Read one run's journal, in one read with the others queued (instances recovered
        together replay together)."""
        if self.inline:
            return self._store.journal(instance_id, run)
        return await self._journals.submit((instance_id, run))

    def _journal_group(self, batch: list[tuple[InstanceId, RunNumber]]) -> list[Journal]:
        found = self._store.journals(batch)
        return [found[key] for key in batch]

    @property
    def database_clock(self) -> bool:
        """Whether the database's clock measures leases (claims and renewals then pass None)."""
        return self._store.database_clock

    async def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a synchronous function on the store's thread (the engine's core, a scan...)."""
        if self.inline:
            return method(*args, **kwargs)
        loop = asyncio.get_running_loop()
        self._thread.calls += 1
        try:
            return await loop.run_in_executor(
                self._thread.executor, functools.partial(method, *args, **kwargs)
            )
        finally:
            self._thread.calls -= 1

    async def commit(self, commit: Commit | Transaction, *, now: float) -> Exception | None:
        """Make one commit (or transaction) durable, sharing the transaction with others
        queued.

        Returns the commit's own refusal (fenced, unexpected state) or None; raises when the
        whole transaction failed, in which case nothing of it is durable.
        """
        if self.inline:
            # A simulation commits alone, on the loop's thread, in the order of its seed.
            [error] = self._store.commit([commit], now=now)
            return error
        return await self._commits.submit((commit, now))

    def _commit_group(
        self, batch: list[tuple[Commit | Transaction, float]]
    ) -> list[Exception | None]:
        # One time for the whole transaction: the latest any of its commits asked for.
        if self.metrics is None:
            return self._store.commit([c for c, _ in batch], now=max(n for _, n in batch))
        began = time.perf_counter()
        outcome = self._store.commit([c for c, _ in batch], now=max(n for _, n in batch))
        self.metrics.group_committed(size=len(batch), seconds=time.perf_counter() - began)
        return outcome

    async def start(
        self, new: NewInstance, claim: StartClaim | None, *, now: float
    ) -> tuple[InstanceRecord, bool]:
        """Start an instance (claimed for ``claim`` when given), sharing the transaction with
        other starts queued; raises the start's own error."""
        if self.inline:
            [started] = self._store.start_instances([(new, claim)], now=now)
        else:
            started = await self._starts.submit((new, claim, now))
        if isinstance(started, Exception):
            raise started
        return started

    def _start_group(
        self, batch: list[tuple[NewInstance, StartClaim | None, float]]
    ) -> list[StartOutcome]:
        starts = [(new, claim) for new, claim, _ in batch]
        return self._store.start_instances(starts, now=max(n for _, _, n in batch))

    # The store's own calls, each on the store's thread under its own name and signature (one
    # declaration: the store's; see _OnStoreThread).
    timeline = _OnStoreThread(JournalStore.timeline)
    adoptable = _OnStoreThread(JournalStore.adoptable)
    adopt = _OnStoreThread(JournalStore.adopt)
    claim = _OnStoreThread(JournalStore.claim)
    admit_effect = _OnStoreThread(JournalStore.admit_effect)
    effect_limits = _OnStoreThread(JournalStore.effect_limits)
    flow_admission = _OnStoreThread(JournalStore.flow_admission)
    register_worker = _OnStoreThread(JournalStore.register_worker)
    heartbeat_worker = _OnStoreThread(JournalStore.heartbeat_worker)
    stop_worker = _OnStoreThread(JournalStore.stop_worker)
    renew = _OnStoreThread(JournalStore.renew)
    cancel_requests = _OnStoreThread(JournalStore.cancel_requests)
    next_available_at = _OnStoreThread(JournalStore.next_available_at)
    pending_deliveries = _OnStoreThread(JournalStore.pending_deliveries)
    effects = _OnStoreThread(JournalStore.effects)
    deliver = _OnStoreThread(JournalStore.deliver)
    apply = _OnStoreThread(JournalStore.apply)

    async def commit_together(
        self, commits: Sequence[Commit | Transaction], *, now: float
    ) -> list[Exception | None]:
        """Many commits in one transaction now, each refused alone, outside the group that
        :meth:`commit` gathers (a worker giving back every lease it holds, say)."""
        return await self.call(self._store.commit, commits, now=now)

    @property
    def groups(self) -> int:
        """Group commits done so far."""
        return self._commits.groups

    def stop(self) -> None:
        """Stop the thread once its calls are done; the store stays open for its owner."""
        self._thread.executor.shutdown(wait=True)

    def close(self) -> None:
        """Stop the thread and close the store."""
        self.stop()
        self._store.close()
