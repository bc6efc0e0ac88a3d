"""The geometry of the home page's activity chart: instances started per bucket of time, each
bar stacked by where those instances are now (internal, pure: no I/O, no clock, no markup).

Statuses are drawn in four groups a person reads at a glance: in flight, succeeded, parked
for a person, ended otherwise (compensated, failed, cancelled). The bars share one scale
whose top is the tallest bar; ``activity.svg.html`` only draws what this lays out.

Example::

    chart = activity(counts, buckets=24, bucket_seconds=3600)
    for bar in chart.segments:
        print(bar.bucket, bar.group, bar.y, bar.height)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ledgerflow.model.instance import InstanceStatus

WIDTH = 1000.0
HEIGHT = 180.0
LEFT = 44.0
RIGHT_MARGIN = 8.0
TOP = 10.0
AXIS_HEIGHT = 24.0
GAP = 0.2  # of a bar's slot, left empty between bars
LABELS = 5

_S = InstanceStatus
GROUPS: dict[str, frozenset[InstanceStatus]] = {
    "in-flight": frozenset({_S.SCHEDULED, _S.RUNNING, _S.WAITING, _S.COMPENSATING, _S.CANCELLING}),
    "succeeded": frozenset({_S.SUCCEEDED}),
    "parked": frozenset({_S.MANUAL_INTERVENTION, _S.FORWARD_RECOVERY_REQUIRED}),
    "ended-otherwise": frozenset({_S.COMPENSATED, _S.FAILED, _S.CANCELLED}),
}


class Counted(Protocol):
    """What the chart reads of a count (:class:`~ledgerflow.ledger.records.StartedCount`)."""

    @property
    def bucket(self) -> int: ...
    @property
    def status(self) -> InstanceStatus: ...
    @property
    def count(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Segment:
    bucket: int
    group: str
    x: float
    y: float
    width: float
    height: float
    count: int


@dataclass(frozen=True, slots=True)
class Label:
    x: float
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Activity:
    width: float
    height: float
    plot_left: float
    plot_right: float
    base_y: float
    top: int  # the count the plot's top stands for
    total: int
    segments: list[Segment] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)


def group_of(status: InstanceStatus) -> str:
    return next(name for name, members in GROUPS.items() if status in members)


def hours_ago(buckets_back: int, bucket_seconds: float) -> str:
    seconds = buckets_back * bucket_seconds
    if seconds == 0:
        return "now"
    return f"-{seconds / 3600:.0f} h" if seconds >= 3600 else f"-{seconds / 60:.0f} min"


def activity(counts: Iterable[Counted], *, buckets: int, bucket_seconds: float) -> Activity:
    """Stacked bars of ``counts`` over ``buckets`` buckets (0 the oldest)."""
    stacks: dict[int, dict[str, int]] = {}
    for c in counts:
        if 0 <= c.bucket < buckets:
            groups = stacks.setdefault(c.bucket, {})
            group = group_of(c.status)
            groups[group] = groups.get(group, 0) + c.count
    tallest = max((sum(g.values()) for g in stacks.values()), default=0)
    top = max(tallest, 1)
    right = WIDTH - RIGHT_MARGIN
    base = HEIGHT - AXIS_HEIGHT
    slot = (right - LEFT) / max(buckets, 1)
    scale = (base - TOP) / top
    segments = []
    for bucket in sorted(stacks):
        y = base
        for group in GROUPS:  # the same order in every bar, in flight at the bottom
            count = stacks[bucket].get(group, 0)
            if count == 0:
                continue
            height = count * scale
            y -= height
            segments.append(
                Segment(
                    bucket=bucket,
                    group=group,
                    x=LEFT + bucket * slot + slot * GAP / 2,
                    y=y,
                    width=slot * (1 - GAP),
                    height=height,
                    count=count,
                )
            )
    step = max(buckets // (LABELS - 1), 1)
    labels = [
        Label(x=LEFT + b * slot, text=hours_ago(buckets - b, bucket_seconds))
        for b in range(0, buckets + 1, step)
    ]
    return Activity(
        width=WIDTH,
        height=HEIGHT,
        plot_left=LEFT,
        plot_right=right,
        base_y=base,
        top=top,
        total=sum(sum(g.values()) for g in stacks.values()),
        segments=segments,
        labels=labels,
    )
