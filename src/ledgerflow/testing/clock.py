"""A clock a test drives: time moves only when told to, or jumps to whoever sleeps.

With ``autojump`` (the default) a sleep moves the clock forward by its length and returns at
once, so a retry backoff of a minute costs nothing; without it, sleepers wait until
:meth:`FakeClock.advance` passes their wake-up time. Either way nothing reads the wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class FakeClock:
    """Example::

    clock = FakeClock()
    engine = Engine(url, registry, clock=clock)
    clock.advance(60)          # a minute passes, instantly
    """

    # Its time is its own: leases are measured by it on every backend.
    real_time = False

    def __init__(self, start: float = 1_800_000_000.0, *, autojump: bool = True) -> None:
        self._now = start
        self.autojump = autojump
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        """The simulated time, in seconds since the epoch."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move forward (never backwards: use :meth:`jump` for a clock fault)."""
        if seconds < 0:
            raise ValueError("advance() only moves forward; jump() models a clock fault")
        self._now += seconds
        self._wake_due()

    def advance_to(self, at: float) -> None:
        """Move the clock forward to ``at`` (never back), waking the sleepers due."""
        if at > self._now:
            self.advance(at - self._now)

    def jump(self, seconds: float) -> None:
        """A clock fault: the clock moves by ``seconds``, backwards if negative."""
        self._now += seconds
        self._wake_due()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the simulated clock: returns when the clock is moved past the due time (at once
        with ``autojump``)."""
        if self.autojump:
            self._now += max(0.0, seconds)
            self._wake_due()
            await asyncio.sleep(0)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), next(self._order), waiter))
        self._wake_due()
        await waiter

    def alarm(self, at: float) -> asyncio.Future[None]:
        """Done once the clock reaches ``at``; waiting for it never jumps the clock (with or
        without ``autojump``): a deadline passes only when something moves time past it."""
        alarm: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (at, next(self._order), alarm))
        self._wake_due()
        return alarm

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)
