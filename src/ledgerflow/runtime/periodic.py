"""Periodic tasks a worker runs beside its instances: detection scans, reconciliation (internal).

Every worker runs them, so they keep running as long as any worker does, with no extra
process to deploy; what they write is idempotent (a flag raised twice is one flag), so many
workers scanning at once is harmless. A task that fails is logged and tried again at its next
turn: housekeeping must never take a worker, and the instances it drives, down with it.

Example::

    worker.periodic.add(PeriodicTask(name="reconcile", interval_seconds=60, run=reconcile))
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ledgerflow.errors import ConfigurationError

log = logging.getLogger("ledgerflow.periodic")

# A worker holds a handful of housekeeping tasks, not a scheduler's worth.
PERIODIC_TASKS_MAX = 16
# The shortest interval a task may ask for: a faster loop would compete with the instances.
INTERVAL_SECONDS_MIN = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodicTask:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[object]]
    # Run once as the worker starts too, not only one interval later.
    at_start: bool = False


@dataclass(slots=True)
class _Entry:
    task: PeriodicTask
    due: float
    runs: int = 0
    failures: int = 0


@dataclass(slots=True)
class Periodic:
    """The periodic tasks of one worker, each with its own interval.

    The cadence is wall time (``time.monotonic``), not the worker's clock: a test's fake clock
    that jumps to every sleeper must not make housekeeping spin. The tasks themselves read the
    worker's clock for their decisions.
    """

    _entries: list[_Entry] = field(default_factory=list)

    def add(self, task: PeriodicTask) -> None:
        """Run ``task`` every ``interval_seconds``, the first time one interval from now (or at
        once, for a task that runs ``at_start``)."""
        if task.interval_seconds < INTERVAL_SECONDS_MIN:
            raise ConfigurationError(
                f"periodic task {task.name!r}: interval must be at least {INTERVAL_SECONDS_MIN}s"
            )
        if len(self._entries) >= PERIODIC_TASKS_MAX:
            raise ConfigurationError(f"a worker runs at most {PERIODIC_TASKS_MAX} periodic tasks")
        if any(e.task.name == task.name for e in self._entries):
            raise ConfigurationError(f"periodic task {task.name!r} is already registered")
        first = 0.0 if task.at_start else task.interval_seconds
        self._entries.append(_Entry(task=task, due=time.monotonic() + first))

    @property
    def names(self) -> list[str]:
        return [e.task.name for e in self._entries]

    def runs(self, name: str) -> int:
        """How many times the task has finished (successfully or not)."""
        return next((e.runs for e in self._entries if e.task.name == name), 0)

    async def run_due(self) -> int:
        """Run every task whose turn has come, one after the other; return how many ran."""
        ran = 0
        for entry in self._entries:
            if entry.due > time.monotonic():
                continue
            try:
                await entry.task.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A housekeeping failure must not stop the worker; it shows in the log.
                entry.failures += 1
                log.exception("periodic task %s failed; it runs again next time", entry.task.name)
            entry.runs += 1
            entry.due = time.monotonic() + entry.task.interval_seconds
            ran += 1
        return ran

    async def run_forever(self) -> None:
        """Run the tasks at their intervals until cancelled (the worker stops)."""
        while True:
            # Tasks may be added while the worker runs; with none yet, look again in a second.
            due = min((e.due for e in self._entries), default=time.monotonic() + 1.0)
            wait = due - time.monotonic()
            await asyncio.sleep(max(wait, 0.0))
            await self.run_due()
