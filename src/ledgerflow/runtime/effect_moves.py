"""What the effect driver does next, as data (internal).

Every decision of the effect protocol (:mod:`~ledgerflow.runtime.effects`) — what a journaled
effect's state means on recovery, what a participant's answer proves, what an UNKNOWN
outcome's lookup settles, what a callback or its deadline says — ends in one of these moves,
which the driver's one loop carries out: send the request (again), resolve an UNKNOWN outcome,
wait for a completion callback, or hand the workflow its value. A proven failure and a park
are raised, not moved: they end the effect. No decision calls another; a retry is a move back
to :class:`Dispatch`, not a recursion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Send attempt ``attempt`` (its intent is durable, its step STARTED)."""

    attempt: int


@dataclass(frozen=True, slots=True)
class Resolve:
    """The outcome is UNKNOWN (durably): settle it by lookup, re-dispatch or an operator."""


@dataclass(frozen=True, slots=True)
class AwaitCallback:
    """The participant accepted attempt ``attempt``: wait, durably, for its callback."""

    attempt: int


@dataclass(frozen=True, slots=True)
class Settled:
    """The effect is settled: ``value`` is what the workflow receives."""

    value: Any


Move = Dispatch | Resolve | AwaitCallback | Settled
