"""Runs a synchronous store on one dedicated thread, for the event loop (internal).

One thread per store keeps driver objects off the loop and serialises access to the
connection; every call returns only after the store call (and so any commit) is done.

Group commit: :meth:`AsyncStore.commit` queues one instance's commit and waits. The store
thread takes every commit queued when it gets to them (at most ``GROUP_COMMIT_BATCH_MAX``) and
applies them in one durable transaction, each in its own savepoint, so that many instances'
steps share one fsync. Nothing waits on purpose to fill a batch: commits gather while the
previous transaction is being made durable, so the added latency is bounded by one transaction
of at most ``GROUP_COMMIT_BATCH_MAX`` commits. A commit's caller is answered only after the
whole transaction is durable (or failed): no step is acknowledged before it is on disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ledgerflow import limits
from ledgerflow.runtime import faults
from ledgerflow.storage.records import Commit
from ledgerflow.storage.store import Store

T = TypeVar("T")

_Queued = tuple[Commit, float, "asyncio.Future[Exception | None]"]


class AsyncStore:
    """``inline=True`` runs store calls on the event loop's own thread: slower for a service,
    but it makes a simulation's interleaving depend on nothing but its seed."""

    def __init__(self, store: Store, *, inline: bool = False) -> None:
        self.store = store
        self.inline = inline
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ledgerflow-store"
        )
        # Appended on the loop's thread, taken on the store thread: hence the lock.
        self._queue: list[_Queued] = []
        self._queue_lock = threading.Lock()
        # Touched on the loop's thread only: True while a flush is submitted or running.
        self._flushing = False
        # Group commits done so far; fault rules can name one (``group`` in ``where``).
        self.groups = 0

    async def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.inline:
            return method(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(method, *args, **kwargs))

    async def commit(self, commit: Commit, *, now: float) -> Exception | None:
        """Make one instance's commit durable, sharing the transaction with others queued.

        Returns the commit's own refusal (fenced, unexpected state) or None; raises when the
        whole transaction failed, in which case nothing of it is durable.
        """
        if self.inline:
            # A simulation commits alone, on the loop's thread, in the order of its seed.
            [error] = self.store.commit([commit], now=now)
            return error
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Exception | None] = loop.create_future()
        with self._queue_lock:
            self._queue.append((commit, now, future))
        if not self._flushing:
            self._flushing = True
            self._submit_flush(loop)
        return await future

    def _submit_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        # Queued behind other store calls already submitted, so reads and claims are not
        # starved by a stream of commits.
        self._thread.submit(self._flush, loop)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the store thread: one durable transaction for the commits queued so far."""
        with self._queue_lock:
            batch = self._queue[: limits.GROUP_COMMIT_BATCH_MAX]
            del self._queue[: len(batch)]
        outcome: list[Exception | None] | BaseException
        try:
            self.groups += 1
            where = {"group": self.groups, "size": len(batch)}
            faults.point("commit.before_group", **where)
            # One time for the whole transaction: the latest any of its commits asked for.
            outcome = self.store.commit([c for c, _, _ in batch], now=max(n for _, n, _ in batch))
            faults.point("commit.after_group", **where)
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter, not lost.
            outcome = exc
        # A closed loop has nobody left waiting for these answers.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._answer, loop, batch, outcome)

    def _answer(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[_Queued],
        outcome: list[Exception | None] | BaseException,
    ) -> None:
        """On the loop's thread: answer the batch's waiters, then flush what queued meanwhile."""
        for index, (_, _, future) in enumerate(batch):
            if future.done():
                continue  # Its waiter was cancelled; the commit is durable all the same.
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome[index])
        with self._queue_lock:
            more = bool(self._queue)
        if more:
            self._submit_flush(loop)
        else:
            self._flushing = False

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.store.close()
