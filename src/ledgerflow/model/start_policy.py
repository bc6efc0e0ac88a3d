"""What a start does when its business key has started an instance already: a pure decision.

A start names a business key; the key's instance may exist. Two policies decide what the
start then does, one for an instance still in flight (``if_running``), one for an instance
that has ended for good (``if_ended``). The defaults are the engine's original rule: return
the instance, *if the start asks for the same thing* -- the same workflow version and the same
input. A start that asks for something else under a used key is a caller's bug and never
attaches silently to another caller's instance: it is refused (``KeyInUseError``), whatever the
policy, unless the policy starts a new run (which takes the new input).

An instance parked for a person (MANUAL_INTERVENTION, FORWARD_RECOVERY_REQUIRED) has not
ended for good: a person may resume it, so ``if_running`` decides for it, never a new run
over a history someone still has to settle.
"""

from __future__ import annotations

import datetime
import enum
import math

from ledgerflow import limits
from ledgerflow.errors import PayloadError
from ledgerflow.model.instance import FINAL_STATUSES, InstanceStatus


class IfRunning(enum.Enum):
    """The key's instance is in flight (or parked for a person)."""

    RETURN = "return"  # return it (the same request only)
    FAIL = "fail"  # refuse the start: KeyInUseError


class IfEnded(enum.Enum):
    """The key's instance has ended for good (SUCCEEDED, COMPENSATED, FAILED, CANCELLED)."""

    RETURN = "return"  # return it as it ended (the same request only)
    NEW_RUN = "new_run"  # start its next run, with this start's input
    # A new run only if it did not succeed (FAILED, COMPENSATED, CANCELLED); else return it.
    NEW_RUN_IF_FAILED = "new_run_if_failed"
    FAIL = "fail"  # refuse the start: KeyInUseError


class StartDecision(enum.Enum):
    RETURN = "return"
    NEW_RUN = "new_run"
    # Refused: why is the value, for KeyInUseError's text.
    REFUSE_RUNNING = "the instance is in flight and if_running='fail'"
    REFUSE_ENDED = "the instance has ended and if_ended='fail'"
    REFUSE_OTHER = "the instance was started with another input or version"


def decide_start(
    status: InstanceStatus, *, same_request: bool, if_running: IfRunning, if_ended: IfEnded
) -> StartDecision:
    """What a start under a used key does, from the instance's status, whether the start asks
    for what the instance was started with (version and input), and the two policies."""
    if status not in FINAL_STATUSES:
        if if_running is IfRunning.FAIL:
            return StartDecision.REFUSE_RUNNING
        return StartDecision.RETURN if same_request else StartDecision.REFUSE_OTHER
    if if_ended is IfEnded.FAIL:
        return StartDecision.REFUSE_ENDED
    if if_ended is IfEnded.NEW_RUN or (
        if_ended is IfEnded.NEW_RUN_IF_FAILED and status is not InstanceStatus.SUCCEEDED
    ):
        return StartDecision.NEW_RUN
    return StartDecision.RETURN if same_request else StartDecision.REFUSE_OTHER


def policies(if_running: str | IfRunning, if_ended: str | IfEnded) -> tuple[IfRunning, IfEnded]:
    """The two policies from their names (a caller's ``"fail"``...), or PayloadError."""
    try:
        running = IfRunning(if_running)
    except ValueError:
        raise PayloadError(
            f"if_running is one of {[p.value for p in IfRunning]}, got {if_running!r}"
        ) from None
    try:
        ended = IfEnded(if_ended)
    except ValueError:
        raise PayloadError(
            f"if_ended is one of {[p.value for p in IfEnded]}, got {if_ended!r}"
        ) from None
    return running, ended


def start_time(
    *, start_at: float | datetime.datetime | None, start_in: float | None, now: float
) -> float | None:
    """When a start is due (seconds since the epoch), from ``start_at`` (epoch seconds or an
    aware datetime) or ``start_in`` (seconds from ``now``); None: now. A time in the past is
    due now."""
    if start_at is not None and start_in is not None:
        raise PayloadError("a start takes start_at or start_in, not both")
    if start_at is None and start_in is None:
        return None
    if isinstance(start_at, datetime.datetime):
        if start_at.tzinfo is None or start_at.utcoffset() is None:
            raise PayloadError("start_at is a timezone-aware datetime (or epoch seconds)")
        at = start_at.timestamp()
    elif start_at is not None:
        at = _seconds(start_at, "start_at")
    else:
        at = now + _seconds(start_in, "start_in")
    if not math.isfinite(at) or at - now > limits.START_DELAY_SECONDS_MAX:
        raise PayloadError(
            f"a start may be delayed by at most {limits.START_DELAY_SECONDS_MAX:.0f}s"
        )
    return at


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PayloadError(f"{what} is a number of seconds, got {value!r}")
    return float(value)
