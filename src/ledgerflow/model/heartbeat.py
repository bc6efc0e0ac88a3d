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

from dataclasses import dataclass
from typing import Any, Protocol

from ledgerflow import limits


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
