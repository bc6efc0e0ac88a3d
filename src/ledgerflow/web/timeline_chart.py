"""The geometry of an instance's visual timeline: lanes, bars and marks on a time axis
(internal, pure: no I/O, no clock, no markup).

The instance page draws its timeline as SVG on the server (no script, nothing to build): one
lane for the instance's status over time, then one per journal position — steps, effects,
waits and timers in journal order, compensations after them. A position's bar runs from its
first timeline entry to its last (to ``now`` while it is still open, or to the moment the
instance parked: nothing moves until a person acts); an effect that became
UNKNOWN and a step whose retry was scheduled get a mark where it happened. This module turns
timeline entries into coordinates in a fixed view box; ``timeline.svg`` only draws them, so the
layout is tested here, without a browser.

Example::

    chart = layout(entries, labels={1: "bank.charge"}, kinds={1: "effect"}, now=clock_now)
    for bar in chart.bars:
        print(bar.lane, bar.x, bar.width, bar.css)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# The view box: the SVG scales to the page's width, these are its own units.
WIDTH = 1000.0
LABEL_WIDTH = 190.0
RIGHT_MARGIN = 14.0
TOP = 8.0
LANE_HEIGHT = 22.0
BAR_HEIGHT = 12.0
AXIS_HEIGHT = 26.0
BAR_WIDTH_MIN = 3.0
TICKS = 5
LABEL_CHARS_MAX = 28
# States after which a position is done: its bar stops at its last entry.
CLOSED = frozenset({"COMPLETED", "FAILED", "CONFIRMED", "SATISFIED"})
# Statuses after which nothing moves by itself: ended, or parked until a person acts. The axis
# stops at the last entry then (a parked instance's chart does not shrink as time passes).
STILL_STATUSES = frozenset(
    {"SUCCEEDED", "COMPENSATED", "FAILED", "CANCELLED", "MANUAL_INTERVENTION",
     "FORWARD_RECOVERY_REQUIRED"}
)  # fmt: skip


class Entry(Protocol):
    """What the chart reads of a timeline entry (:class:`~ledgerflow.ledger.records.
    TimelineEntry` has it)."""

    @property
    def at(self) -> float: ...
    @property
    def subject(self) -> str: ...
    @property
    def to_state(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Lane:
    label: str
    y: float


@dataclass(frozen=True, slots=True)
class Bar:
    lane: int
    x: float
    y: float
    width: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Mark:
    # "unknown" (an effect's outcome in doubt) or "retry" (a retry scheduled).
    kind: str
    x: float
    y: float
    title: str


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    width: float
    height: float
    plot_left: float
    plot_right: float
    axis_y: float
    lanes: list[Lane] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    start: float = 0.0
    span: float = 0.0


def position_of(subject: str) -> int | None:
    """The journal position a subject names (``step:3``, ``effect:-1``), else None."""
    kind, _, seq = subject.partition(":")
    if kind in ("step", "effect"):
        try:
            return int(seq)
        except ValueError:
            return None
    return None


def duration_label(seconds: float) -> str:
    """An offset from the start, in the unit that reads best for it."""
    if seconds < 1:
        return f"+{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"+{seconds:.1f} s"
    if seconds < 7200:
        return f"+{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"+{seconds / 3600:.1f} h"
    return f"+{seconds / 86400:.1f} d"


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS_MAX else text[: LABEL_CHARS_MAX - 1] + "…"


def layout(
    entries: Sequence[Entry],
    *,
    labels: Mapping[int, str],
    kinds: Mapping[int, str],
    now: float,
) -> Chart:
    """The chart of ``entries`` (oldest first). ``labels`` and ``kinds`` name each journal
    position (``bank.charge``, ``effect``); ``now`` ends the bars still open."""
    positions: dict[int, list[Entry]] = {}
    instance: list[Entry] = []
    for entry in entries:
        seq = position_of(entry.subject)
        if seq is not None:
            positions.setdefault(seq, []).append(entry)
        elif entry.subject == "instance":
            instance.append(entry)
    # Steps in journal order, then compensations (negative positions) in the order they ran.
    order = sorted(s for s in positions if s >= 0) + sorted(
        (s for s in positions if s < 0), key=lambda s: positions[s][0].at
    )
    times = [e.at for e in entries]
    start = min(times) if times else now
    still = bool(instance) and instance[-1].to_state in STILL_STATUSES
    end = max(times) if still else max([*times, now])
    span = max(end - start, 1e-3)
    left, right = LABEL_WIDTH, WIDTH - RIGHT_MARGIN

    def x_of(at: float) -> float:
        return left + (at - start) / span * (right - left)

    def y_of(lane: int) -> float:
        return TOP + lane * LANE_HEIGHT

    chart_lanes = [Lane(label="instance", y=y_of(0))]
    bars = _status_bars(instance, x_of, y_of(0), end)
    marks: list[Mark] = []
    for lane, seq in enumerate(order, start=1):
        kind = kinds.get(seq, "compensation" if seq < 0 else "step")
        name = labels.get(seq, "")
        chart_lanes.append(Lane(label=_short(f"{seq} {name}".strip()), y=y_of(lane)))
        bar, found = _position(positions[seq], lane, f"{seq} {name}", kind, x_of, y_of(lane), end)
        bars.append(bar)
        marks += found
    axis_y = y_of(len(chart_lanes)) + 4
    ticks = [
        Tick(x=x_of(start + span * i / (TICKS - 1)), label=duration_label(span * i / (TICKS - 1)))
        for i in range(TICKS)
    ]
    return Chart(
        width=WIDTH,
        height=axis_y + AXIS_HEIGHT,
        plot_left=left,
        plot_right=right,
        axis_y=axis_y,
        lanes=chart_lanes,
        bars=bars,
        marks=marks,
        ticks=ticks,
        start=start,
        span=span,
    )


def _position(
    seen: Sequence[Entry], lane: int, name: str, kind: str, x_of: _Scale, y: float, end: float
) -> tuple[Bar, list[Mark]]:
    """One journal position's bar (first entry to last, or to ``end`` while not settled) and
    its marks (UNKNOWN, retry scheduled)."""
    last = seen[-1]
    closed = last.to_state in CLOSED
    stop = last.at if closed else end
    x = x_of(seen[0].at)
    bar = Bar(
        lane=lane,
        x=x,
        y=y,
        width=max(x_of(stop) - x, BAR_WIDTH_MIN),
        css=f"bar kind-{kind} state-{last.to_state}" + ("" if closed else " open"),
        title=f"{name} ({kind}): {last.to_state}",
    )
    marks = [
        Mark("unknown", x_of(e.at), y, f"{name} UNKNOWN")
        if e.to_state == "UNKNOWN"
        else Mark("retry", x_of(e.at), y, f"{name} retry scheduled")
        for e in seen
        if e.to_state in ("UNKNOWN", "RETRY_SCHEDULED")
    ]
    return bar, marks


def _status_bars(instance: Sequence[Entry], x_of: _Scale, y: float, end: float) -> list[Bar]:
    """The instance lane: one segment per status, from the entry that entered it to the
    next (the last to ``end``)."""
    bars = []
    for i, entry in enumerate(instance):
        until = instance[i + 1].at if i + 1 < len(instance) else end
        x = x_of(entry.at)
        bars.append(
            Bar(
                lane=0,
                x=x,
                y=y,
                width=max(x_of(until) - x, BAR_WIDTH_MIN),
                css=f"bar tl-status-{entry.to_state}",
                title=entry.to_state,
            )
        )
    return bars


class _Scale(Protocol):
    def __call__(self, at: float, /) -> float: ...
