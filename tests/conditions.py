"""Bounded waits on conditions, shared by the tests (never a blind sleep).

A test that waits for something to happen polls a condition until it holds or a bound passes,
and then fails saying what it was waiting for: :func:`until` on an event loop, and
:func:`eventually` in plain code (a test driving processes).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

WAIT_SECONDS_MAX = 30.0
POLL_SECONDS = 0.01
T = TypeVar("T")


async def until(
    condition: Callable[[], T | None] | Callable[[], Awaitable[T | None]],
    *,
    what: str,
    timeout: float = WAIT_SECONDS_MAX,
) -> T:
    """Poll ``condition`` (plain or async) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(POLL_SECONDS)


def eventually(
    condition: Callable[[], T | None], *, what: str, timeout: float = WAIT_SECONDS_MAX
) -> T:
    """Poll ``condition`` until it returns something truthy, blocking; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL_SECONDS)
