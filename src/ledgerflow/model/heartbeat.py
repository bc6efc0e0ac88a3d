"""Effect heartbeats: what an in-flight attempt says to the engine, and what it hears back.

An effect declared with ``heartbeat_timeout=`` must call ``await call.heartbeat(details)``
more often than that: each call is a write fenced on (effect, attempt, owner generation),
throttled to at most one every :func:`throttle_seconds`, whose answer says whether a cancel
was requested. An attempt that misses its heartbeat is cut off: its outcome is UNKNOWN (the
participant may have applied it), settled by the lookup before any re-dispatch under the same
key, never FAILED, and it counts as an attempt. The last durable details reach the next
attempt (``call.last_heartbeat``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ledgerflow import limits
from ledgerflow.errors import RegistrationError
from ledgerflow.model import arguments


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAnswer:
    """What ``await call.heartbeat(details)`` answers."""

    cancel_requested: bool
    """Someone asked to cancel the instance: the effect may stop early (raising leaves its
    outcome UNKNOWN, settled by lookup; returning evidence confirms it)."""
    written: bool
    """The heartbeat was made durable now; False: throttled, kept to be written with the next
    one (or when the effect raises)."""


class Heartbeats(Protocol):
    """The engine's side of one attempt's heartbeats (internal; see ``EffectCall.heartbeat``)."""

    async def beat(self, details: Any) -> HeartbeatAnswer: ...


def throttle_seconds(timeout_seconds: float) -> float:
    """The least time between two heartbeat writes of one attempt: a few writes per timeout
    (so one slow write never costs the attempt), and never longer than the cap."""
    return min(
        timeout_seconds / limits.HEARTBEAT_WRITES_PER_TIMEOUT, limits.HEARTBEAT_THROTTLE_SECONDS_MAX
    )


def checked_heartbeat_timeout(
    value: object, function: Callable[..., Any], *, what: str, timeout: float
) -> float | None:
    """A declaration's ``heartbeat_timeout`` in seconds (None: none declared), or why it
    cannot work: it is awaited (an ``async def`` effect) and may not outlast the timeout."""
    seconds = arguments.seconds(value, what=what, option="heartbeat_timeout", optional=True)
    if seconds is None:
        return None
    if not inspect.iscoroutinefunction(function):
        raise RegistrationError(
            f"{what}: heartbeat_timeout= needs an async def effect (it awaits call.heartbeat)"
        )
    if seconds > timeout:
        raise RegistrationError(
            f"{what}: heartbeat_timeout ({seconds:g}s) is longer than timeout_seconds "
            f"({timeout:g}s): the attempt would time out first"
        )
    return seconds
