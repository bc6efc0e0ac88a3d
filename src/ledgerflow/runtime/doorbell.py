"""The doorbell of published values: a commit that publishes wakes the callers of the same
engine waiting for it (internal).

``engine.update`` and ``engine.wait_published`` read the store until the value they wait for
is there. Read every ``limits.VALUE_POLL_SECONDS`` alone, a reply committed by the engine's
own worker would wait up to a whole interval to be seen. A session's commit that carries a
:class:`~ledgerflow.ledger.values.PublishValue` rings this doorbell for (instance, name)
once the transaction is durable; a waiting caller of the same engine wakes at once and reads
the store again. The doorbell only says "read again": the store still answers, so a ring
with no value (or a value another process committed, which rings nothing here) changes
nothing but when the next read happens -- callers in other processes keep polling.

Thread-safe: a worker may commit from another thread or loop than the caller waits on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from ledgerflow.model.ids import InstanceId

Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class Doorbell:
    """Who waits for which (instance, value name), and the ring that wakes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, str], list[Waiter]] = {}

    @contextlib.contextmanager
    def listening(self, instance_id: InstanceId, name: str) -> Iterator[asyncio.Event]:
        """An event set by every ring for ``name`` of the instance while the block runs (the
        caller clears it before each read of the store, so no ring is missed)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        key = (str(instance_id), name)
        with self._lock:
            self._waiters.setdefault(key, []).append(waiter)
        try:
            yield waiter[1]
        finally:
            with self._lock:
                left = [w for w in self._waiters.get(key, []) if w is not waiter]
                if left:
                    self._waiters[key] = left
                else:
                    self._waiters.pop(key, None)

    def ring(self, instance_id: InstanceId, name: str) -> None:
        """A value ``name`` of the instance was committed: wake whoever waits for it."""
        with self._lock:
            waiters = list(self._waiters.get((str(instance_id), name), ()))
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # the waiter's loop closed meanwhile
                loop.call_soon_threadsafe(event.set)


async def rung_or_timeout(event: asyncio.Event, seconds: float) -> None:
    """Wait until the doorbell rang or ``seconds`` passed (the poll of other processes)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=seconds)
