"""Where the runtime gets the time from (internal).

Only this module reads the wall clock, so a test can drive time with a fake one. On SQLite all
workers share one machine, hence one clock.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    # True when now() is the real time, which a database's clock keeps too: where the
    # database measures leases (PostgreSQL), it then decides. A clock a test drives makes a
    # time of its own that the database never sees pass, so it decides everywhere.
    @property
    def real_time(self) -> bool: ...

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def alarm(self, at: float) -> asyncio.Future[None]:
        """A future that is done once the clock reaches ``at`` (cancel it to drop it). Unlike
        :meth:`sleep`, waiting for it never moves a test's clock: it marks a deadline that
        something else must pass."""
        ...


class SystemClock:
    real_time = True

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def alarm(self, at: float) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        alarm: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(max(0.0, at - self.now()), _ring, alarm)
        alarm.add_done_callback(lambda _: timer.cancel())
        return alarm


def _ring(alarm: asyncio.Future[None]) -> None:
    if not alarm.done():
        alarm.set_result(None)


SYSTEM_CLOCK = SystemClock()
