"""The visual timeline's geometry (``ledgerflow.web.timeline_chart``), pure: lanes in journal
order, bars from a position's first entry to its last (or to now while open), UNKNOWN and
retry marks where they happened, and an axis that spans what is drawn."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ledgerflow.web.timeline_chart import (
    BAR_WIDTH_MIN,
    LABEL_CHARS_MAX,
    LABEL_WIDTH,
    RIGHT_MARGIN,
    TICKS,
    WIDTH,
    duration_label,
    layout,
    position_of,
)

LEFT, RIGHT = LABEL_WIDTH, WIDTH - RIGHT_MARGIN


@dataclass(frozen=True)
class E:
    at: float
    subject: str
    to_state: str


# An instance that reserved, retried a price step, compensated and ended at t=110.
ENDED = [
    E(100, "instance", "RUNNING"),
    E(101, "step:1", "STARTED"),
    E(102, "effect:1", "CONFIRMED"),
    E(102, "step:1", "COMPLETED"),
    E(103, "step:2", "RETRY_SCHEDULED"),
    E(104, "step:2", "COMPLETED"),
    E(105, "instance", "COMPENSATING"),
    E(106, "effect:-1", "PLANNED"),
    E(108, "effect:-1", "CONFIRMED"),
    E(110, "instance", "COMPENSATED"),
]


def x(at: float, start: float, end: float) -> float:
    return LEFT + (at - start) / (end - start) * (RIGHT - LEFT)


def test_lanes_are_the_instance_then_steps_then_compensations() -> None:
    """Goal: the instance's lane first, then each position in journal order, compensations
    (negative positions) after the steps, each named by its label.

    Method: lay out the ended instance: four lanes with the expected labels, evenly spaced.
    """
    chart = layout(ENDED, labels={1: "shop.reserve", 2: "price", -1: "shop.release"},
                   kinds={1: "effect", 2: "local"}, now=999)  # fmt: skip
    assert [lane.label for lane in chart.lanes] == [
        "instance", "1 shop.reserve", "2 price", "-1 shop.release",
    ]  # fmt: skip
    gaps = {b.y - a.y for a, b in zip(chart.lanes, chart.lanes[1:], strict=False)}
    assert len(gaps) == 1
    assert chart.height > chart.lanes[-1].y


def test_an_ended_instance_spans_the_axis_and_closed_bars_stop_at_their_last_entry() -> None:
    """Goal: the axis runs from the first entry to the end (not to now, once ended), and a
    position's bar from its first entry to its last.

    Method: the ended instance laid out with ``now`` far later: the reserve bar runs from
    x(101) to x(102), the compensation's from x(106) to x(108); the instance lane has a
    segment per status, the last at x(110); the ticks run from +0 to the whole span.
    """
    chart = layout(ENDED, labels={}, kinds={1: "effect", 2: "local"}, now=10_000)
    assert (chart.start, chart.span) == (100, 10)
    by_lane = {b.lane: b for b in chart.bars if b.lane > 0}
    assert by_lane[1].x == pytest.approx(x(101, 100, 110))
    assert by_lane[1].x + by_lane[1].width == pytest.approx(x(102, 100, 110))
    assert by_lane[3].x == pytest.approx(x(106, 100, 110))
    assert by_lane[3].x + by_lane[3].width == pytest.approx(x(108, 100, 110))
    assert "kind-compensation" in by_lane[3].css
    assert "kind-effect" in by_lane[1].css
    statuses = [b for b in chart.bars if b.lane == 0]
    assert [b.css for b in statuses] == [
        "bar tl-status-RUNNING", "bar tl-status-COMPENSATING", "bar tl-status-COMPENSATED",
    ]  # fmt: skip
    assert statuses[1].x == pytest.approx(x(105, 100, 110))
    assert [t.label for t in (chart.ticks[0], chart.ticks[-1])] == ["+0 ms", "+10.0 s"]
    assert len(chart.ticks) == TICKS
    assert chart.ticks[-1].x == pytest.approx(RIGHT)


def test_an_open_position_runs_on_and_unknown_and_retries_are_marked() -> None:
    """Goal: an effect whose outcome is UNKNOWN runs on (it is not settled) with a mark where
    it became UNKNOWN, and a retry scheduled is marked where it was; a parked instance's
    axis stops where it parked (nothing moves until a person acts), one in flight runs to
    ``now``.

    Method: a charge that became UNKNOWN at t=4 and an instance parked at t=5, now t=20:
    the axis spans 5 s, the charge's bar (open) ends at the right edge, one UNKNOWN mark at
    x(4) on its lane, one retry mark at x(2) on the price step's lane. The same entries
    without the park span 20 s.
    """
    entries = [
        E(0, "instance", "RUNNING"),
        E(1, "step:1", "STARTED"),
        E(2, "step:1", "RETRY_SCHEDULED"),
        E(3, "step:1", "COMPLETED"),
        E(3, "step:2", "STARTED"),
        E(4, "effect:2", "UNKNOWN"),
        E(5, "instance", "MANUAL_INTERVENTION"),
    ]
    chart = layout(entries, labels={2: "shop.charge"}, kinds={2: "effect"}, now=20)
    assert chart.span == 5
    charge = next(b for b in chart.bars if b.lane == 2)
    assert charge.x + charge.width == pytest.approx(RIGHT)
    assert charge.css == "bar kind-effect state-UNKNOWN open"
    assert [(m.kind, m.y) for m in chart.marks] == [
        ("retry", chart.lanes[1].y), ("unknown", chart.lanes[2].y),
    ]  # fmt: skip
    assert chart.marks[0].x == pytest.approx(x(2, 0, 5))
    assert chart.marks[1].x == pytest.approx(x(4, 0, 5))
    in_flight = layout(entries[:-1], labels={}, kinds={}, now=20)
    assert in_flight.span == 20


def test_a_single_moment_and_long_labels_still_draw() -> None:
    """Goal: an instance whose entries share one instant still draws visible bars (no
    division by zero), and a long label is cut to fit the label column.

    Method: two entries at the same time, a 60-character label: each bar is at least the
    minimum width, the label is LABEL_CHARS_MAX characters ending in an ellipsis.
    """
    entries = [E(7, "instance", "RUNNING"), E(7, "step:1", "STARTED")]
    chart = layout(entries, labels={1: "x" * 60}, kinds={}, now=7)
    assert all(b.width >= BAR_WIDTH_MIN for b in chart.bars)
    assert len(chart.lanes[1].label) == LABEL_CHARS_MAX
    assert chart.lanes[1].label.endswith("…")
    assert layout([], labels={}, kinds={}, now=5).lanes[0].label == "instance"


@pytest.mark.parametrize(
    ("seconds", "label"),
    [(0.25, "+250 ms"), (12.34, "+12.3 s"), (600, "+10.0 min"), (7200, "+2.0 h"),
     (3 * 86400, "+3.0 d")],
)  # fmt: skip
def test_offsets_read_in_the_unit_that_fits(seconds: float, label: str) -> None:
    assert duration_label(seconds) == label


def test_only_step_and_effect_subjects_are_positions() -> None:
    assert [position_of(s) for s in ("step:3", "effect:-1", "owner", "inbox", "step:x")] == [
        3, -1, None, None, None,
    ]  # fmt: skip
