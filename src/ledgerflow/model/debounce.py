"""Debounced starts by business key: the window, and when a collapsed start is due (pure).

A burst of starts for one key (a user typing, a webhook storm) should run the workflow once,
with the last input, after the burst has gone quiet: a trailing-edge debounce, as Inngest's
``debounce`` (period, key, timeout) and DBOS's ``Debouncer`` offer. The first start of a key
creates its instance SCHEDULED for ``now + window``; a later debounced start of that key, while
the instance is still SCHEDULED and no worker has claimed it, replaces its pending input and
moves its start to ``now + window``, never past ``opened + max`` (the window's first start plus
the longest wait). Past :data:`~ledgerflow.limits.DEBOUNCE_STARTS_MAX` starts in one window the
pending start is due at once, so a storm never grows its history without bound.

Once the instance has been claimed (its run begun), a debounced start is a plain start under a
used key again: ``if_running`` and ``if_ended`` decide (``if_ended="new_run"`` opens a new
window for a new run). The store decides all of it in the start's one transaction.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.errors import PayloadError

# The reason code a pending debounced instance shows (``show``, ``list``, the API).
DEBOUNCED = "debounced"
# The timeline's subject for each start of a window: from_state is the count of starts before
# it (None: the start that opened the window), to_state the count with it.
TIMELINE_SUBJECT = "debounce"


@dataclass(frozen=True, slots=True, kw_only=True)
class Debounce:
    """A start's debounce: its quiet window and the longest wait from the window's opening.
    ``database_clock``: the store decides by the database's clock (real time on PostgreSQL),
    not by the caller's ``now``."""

    window_seconds: float
    max_seconds: float
    database_clock: bool = False


def debounce_of(
    debounce_seconds: object, debounce_max_seconds: object, *, delayed: bool
) -> Debounce | None:
    """The debounce a start asks for, or None; PayloadError for a combination that cannot
    be meant: a debounce with ``start_at``/``start_in`` (``delayed``), a window that is not a
    positive number of seconds, a longest wait shorter than the window, or either past
    :data:`~ledgerflow.limits.START_DELAY_SECONDS_MAX`. Without ``debounce_max_seconds`` the
    longest wait is :data:`~ledgerflow.limits.DEBOUNCE_MAX_WINDOWS_DEFAULT` windows."""
    if debounce_seconds is None:
        if debounce_max_seconds is not None:
            raise PayloadError("debounce_max_seconds needs debounce_seconds")
        return None
    if delayed:
        raise PayloadError(
            "a debounced start is due when its window goes quiet: it takes no start_at or start_in"
        )
    window = _positive(debounce_seconds, "debounce_seconds")
    most = (
        min(window * limits.DEBOUNCE_MAX_WINDOWS_DEFAULT, limits.START_DELAY_SECONDS_MAX)
        if debounce_max_seconds is None
        else _positive(debounce_max_seconds, "debounce_max_seconds")
    )
    if most < window:
        raise PayloadError(
            f"debounce_max_seconds ({most:g}) is shorter than debounce_seconds ({window:g})"
        )
    return Debounce(window_seconds=window, max_seconds=most)


def debounced_due(debounce: Debounce, *, now: float, opened_at: float, starts: int) -> float:
    """When a window's pending start is due after one more start at ``now`` (``starts`` is
    the count with it): ``now + window``, never past ``opened_at + max``; due now once the
    window holds :data:`~ledgerflow.limits.DEBOUNCE_STARTS_MAX` starts."""
    if starts >= limits.DEBOUNCE_STARTS_MAX:
        return now
    return min(now + debounce.window_seconds, opened_at + debounce.max_seconds)


_DUE = re.compile(r"due at \S+ \((-?\d+(?:\.\d+)?)\)")


def due_line(head: str, due: float) -> str:
    """The part of a window's timeline line that says when its pending start is due."""
    when = datetime.datetime.fromtimestamp(due, datetime.UTC).isoformat(timespec="seconds")
    return f"{head}: due at {when} ({due:.6f})"


def due_of(detail: str | None) -> float | None:
    """When a window's timeline line says its pending start is due (None: not such a line)."""
    found = None if detail is None else _DUE.search(detail)
    return None if found is None else float(found.group(1))


# How a collapsed start's timeline line ends: the input it replaced, as the journal holds it.
_REPLACED = "; the input it replaced: "


def replaced_detail(head: str, replaced: str) -> str:
    """A collapsed start's timeline line: ``head`` and the input it replaced (JSON text)."""
    return f"{head}{_REPLACED}{replaced}"


def replaced_input(detail: str | None) -> str | None:
    """The input a collapsed start's timeline line says it replaced (None: not such a line)."""
    if detail is None or _REPLACED not in detail:
        return None
    return detail.split(_REPLACED, 1)[1]


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PayloadError(f"{what} is a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise PayloadError(f"{what} is a positive number of seconds, got {value!r}")
    if seconds > limits.START_DELAY_SECONDS_MAX:
        raise PayloadError(
            f"{what} is at most {limits.START_DELAY_SECONDS_MAX:.0f}s, got {value!r}"
        )
    return seconds
