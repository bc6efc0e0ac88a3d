"""The home page's activity chart geometry (``ledgerflow.web.activity_chart``), pure: bars
per bucket stacked by status group on one scale, in flight at the bottom, labels from the
window's start to now."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ledgerflow.model.instance import InstanceStatus
from ledgerflow.web.activity_chart import GROUPS, activity, group_of, hours_ago

S = InstanceStatus


@dataclass(frozen=True)
class C:
    bucket: int
    status: InstanceStatus
    count: int


def test_bars_stack_by_group_on_one_scale() -> None:
    """Goal: each bucket's bar stacks its groups in one order, and the tallest bar reaches
    the top of the plot.

    Method: bucket 2 holds 2 running + 1 waiting (in flight 3) and 1 succeeded, bucket 5
    holds 2 parked: the scale's top is 4; bucket 2's in-flight segment sits on the base, its
    succeeded one on top of it reaching the top; bucket 5's is half as tall; a count for a
    bucket outside the window is not drawn.
    """
    counts = [C(2, S.RUNNING, 2), C(2, S.WAITING, 1), C(2, S.SUCCEEDED, 1),
              C(5, S.MANUAL_INTERVENTION, 2), C(30, S.RUNNING, 9)]  # fmt: skip
    chart = activity(counts, buckets=24, bucket_seconds=3600)
    assert (chart.top, chart.total) == (4, 6)
    [flight, done, parked] = chart.segments
    assert (flight.bucket, flight.group, flight.count) == (2, "in-flight", 3)
    assert flight.y + flight.height == pytest.approx(chart.base_y)
    assert done.group == "succeeded"
    assert done.y + done.height == pytest.approx(flight.y)
    assert done.y == pytest.approx(10.0)  # the plot's top
    assert (parked.bucket, parked.group) == (5, "parked")
    assert parked.height == pytest.approx((flight.height + done.height) / 2)
    assert parked.x > flight.x
    assert flight.width < (chart.plot_right - chart.plot_left) / 24


def test_an_empty_window_draws_no_bar_and_labels_run_to_now() -> None:
    chart = activity([], buckets=24, bucket_seconds=3600)
    assert (chart.segments, chart.total, chart.top) == ([], 0, 1)
    assert [label.text for label in chart.labels] == ["-24 h", "-18 h", "-12 h", "-6 h", "now"]
    assert chart.labels[-1].x == pytest.approx(chart.plot_right)


def test_every_status_has_one_group() -> None:
    grouped = [s.value for members in GROUPS.values() for s in members]
    assert sorted(grouped) == sorted(s.value for s in S)
    assert [group_of(s) for s in (S.CANCELLED, S.FORWARD_RECOVERY_REQUIRED)] == [
        "ended-otherwise", "parked",
    ]  # fmt: skip
    assert (hours_ago(0, 3600), hours_ago(1, 600)) == ("now", "-10 min")
