"""A worker's push wake-ups: its store's wake source, started off the event loop, waking the
worker from the source's thread (internal).

The source (:mod:`ledgerflow.storage.wake_sources`: a PostgreSQL listener, a SQLite
``data_version`` watch) runs on a thread of its own and only ever says "look now"; the worker
then claims as at its poll, which stays the floor. Starting probes the source (bounded, off
the loop, so the worker claims meanwhile); a source that cannot push leaves the worker polling
and says so once, in the log and in ``ledgerflow_worker_push_wakeups``. Only a worker on real
time listens: a simulation's worker wakes when its script says, never when a thread does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ledgerflow.runtime.metrics import Metrics
from ledgerflow.storage.wake_sources import WakeSource


class PushWakeups:
    """One worker's wake source while the worker runs."""

    def __init__(
        self, source: WakeSource, *, wake: Callable[[], None], metrics: Metrics | None
    ) -> None:
        self.source = source
        self._wake = wake
        self._metrics = metrics
        self._started: asyncio.Task[bool] | None = None
        # Whether pushes arrive now (False until the probe heard one, and while reconnecting).
        self.pushing = False
        # What starting the source answered: None until its probe ended, then whether it pushes.
        self.probed: bool | None = None

    def start(self) -> None:
        """Start the source beside the worker's loop (its probe takes up to a bound)."""
        loop = asyncio.get_running_loop()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._wake)

        self._started = asyncio.create_task(
            asyncio.to_thread(self.source.start, wake, self._pushing),
            name="ledgerflow-wakeups",
        )
        self._started.add_done_callback(self._probed)

    def _probed(self, task: asyncio.Task[bool]) -> None:
        self.probed = not task.cancelled() and task.exception() is None and task.result()

    def _pushing(self, pushing: bool) -> None:
        self.pushing = pushing
        if self._metrics is not None:
            self._metrics.push_wakeups(pushing=pushing)

    def idle(self, idle: bool) -> None:
        self.source.idle(idle)

    async def close(self) -> None:
        if self._started is not None:
            # A probe still running ends within its bound; then nothing listens any more.
            with contextlib.suppress(Exception):
                await self._started
        await asyncio.to_thread(self.source.close)
