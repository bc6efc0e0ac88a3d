"""The pure decision of flow control (model/flow.py, flow_order.py): concurrency first, then the
waiters' order (priority, weighted fair tags, arrival), then a GCRA with a burst; and the window
check the oracle uses."""

from __future__ import annotations

import pytest

from ledgerflow.model.flow import (
    AdmissionState,
    FlowLimit,
    KeyState,
    admissions_over_rate,
    decide,
    flow_key,
)
from ledgerflow.model.flow_order import (
    WAITER_STALE_SECONDS,
    Waiter,
    ahead_of,
    checked_priority,
    fairness_bound,
    start_tag,
)

LIMIT = FlowLimit(scope="effect:api.send", rate_per_second=10.0, burst=3)


def _ask(limit: FlowLimit, key: KeyState, now: float, *, in_flight: int = 0, ahead: int = 0):  # type: ignore[no-untyped-def]
    return decide(
        limit, key, in_flight=in_flight, ahead=ahead, tag=key.vtime, now=now, poll_seconds=0.05
    )


def test_a_burst_at_once_then_one_an_interval_later() -> None:
    key = KeyState()
    admitted = 0
    for _ in range(6):
        d = _ask(LIMIT, key, 100.0)
        key = d.key_state
        admitted += d.state is AdmissionState.ADMITTED
    assert admitted == 3
    early = _ask(LIMIT, key, 100.05)
    assert (early.state, early.reason) == (AdmissionState.THROTTLED, "rate")
    assert early.retry_at == pytest.approx(100.1)
    assert _ask(LIMIT, key, 100.1).state is AdmissionState.ADMITTED


def test_a_waiter_with_others_ahead_waits_its_turn() -> None:
    """Two waiters ahead: told to ask again two grants after the next, and never admitted
    while they come first, even when the GCRA would allow it."""
    d = _ask(LIMIT, KeyState(tat=100.0), 100.0, ahead=2)
    assert (d.state, d.reason) == (AdmissionState.THROTTLED, "order")
    assert d.retry_at == pytest.approx(100.2)
    assert _ask(LIMIT, KeyState(), 100.0, ahead=1).state is AdmissionState.THROTTLED


def test_a_late_waker_is_checked_again_by_the_gcra() -> None:
    key = KeyState(tat=101.3)  # the key admitted up to its tolerance
    d = _ask(LIMIT, key, 101.0)
    assert d.state is AdmissionState.THROTTLED
    assert d.retry_at == pytest.approx(101.1)


def test_the_order_is_priority_then_fair_tag_then_arrival() -> None:
    def w(effect: str, priority: int, tag: float, since: float, retry: float = 10.0) -> Waiter:
        return Waiter(effect, 1, priority, tag, since, retry)

    low_early, high_late = w("a", 2, 0.0, 1.0), w("b", 4, 5.0, 9.0)
    same_tag_later = w("c", 2, 0.0, 2.0)
    waiters = [low_early, high_late, same_tag_later]
    assert ahead_of(high_late, waiters, now=10.0) == (0, 0)
    assert ahead_of(low_early, waiters, now=10.0) == (1, 0)
    assert ahead_of(same_tag_later, waiters, now=10.0) == (2, 0)
    # A waiter silent long past its time is not waited for.
    stale = w("d", 5, 0.0, 0.0, retry=10.0 - WAITER_STALE_SECONDS - 0.1)
    assert ahead_of(high_late, [*waiters, stale], now=10.0) == (0, 1)


def test_start_time_fair_tags_interleave_a_heavy_and_a_light_key_by_weight() -> None:
    """1,000 heavy waiters queued first, then 5 light ones of weight 2: by their tags the light
    key's 5 are admitted within the next 3 heavy ones, within the documented bound."""
    vtime, finish = 0.0, {}
    tags: list[tuple[float, int, str]] = []
    for n, key in enumerate(["heavy"] * 1000 + ["light"] * 5):
        weight = 2.0 if key == "light" else 1.0
        tag, finish[key] = start_tag(vtime=vtime, finish=finish.get(key), weight=weight)
        tags.append((tag, n, key))
    order = [key for _, _, key in sorted(tags)]
    assert order[:8].count("light") == 5
    heavy, light = order[:8].count("heavy"), 5
    assert abs(heavy / 1.0 - light / 2.0) <= fairness_bound(1.0, 2.0) + 1


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match="fair_by"):
        FlowLimit(scope="effect:a.b", rate_per_second=1.0, fair_by="tenant", per="tenant")
    with pytest.raises(ValueError, match="declare fair_by"):
        FlowLimit(scope="effect:a.b", rate_per_second=1.0, weights={"x": 2})
    with pytest.raises(ValueError, match="> 0"):
        FlowLimit(scope="effect:a.b", rate_per_second=1.0, fair_by="tenant", weights={"x": 0})
    with pytest.raises(ValueError, match="1 \\(lowest\\) to 5"):
        checked_priority(9, what="x")
    assert FlowLimit(scope="effect:a.b", rate_per_second=1.0, fair_by="tenant").weight("x") == 1


def test_concurrency_applies_first_and_takes_no_rate_permit() -> None:
    limit = FlowLimit(scope="effect:api.send", concurrency_max=2, rate_per_second=1.0)
    key = KeyState()
    d = _ask(limit, key, 5.0, in_flight=2)
    assert (d.state, d.reason, d.retry_at) == (AdmissionState.THROTTLED, "concurrency", 5.05)
    assert d.key_state == key
    assert _ask(limit, key, 5.0, in_flight=1).state is AdmissionState.ADMITTED


def test_limits_are_checked() -> None:
    for bad in (
        {"rate_per_second": 0.0},
        {"concurrency_max": -1},
        {"rate_per_second": 1.0, "burst": 0},
        {"rate_per_second": 1.0, "per": "customer"},
        {},
    ):
        with pytest.raises(ValueError, match=r"must be|per is|bounds concurrency"):
            FlowLimit(scope="effect:a.b", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scope starts with"):
        FlowLimit(scope="workflow:a", rate_per_second=1.0)


def test_flow_keys() -> None:
    payload = {"customer": {"id": 42}}
    assert flow_key(None, tenant="acme", payload=payload) == "*"
    assert flow_key("tenant", tenant="acme", payload=payload) == "acme"
    assert flow_key("input.customer.id", tenant="acme", payload=payload) == "42"
    assert flow_key("input.missing.id", tenant="acme", payload=payload) == "null"


def test_the_window_check_finds_a_burst_too_many() -> None:
    held = [0.0, 0.0, 0.0, 0.1, 0.2, 0.3]
    assert admissions_over_rate(held, rate_per_second=10.0, burst=3) is None
    over = [0.0, 0.0, 0.0, 0.05, 0.2]
    assert admissions_over_rate(over, rate_per_second=10.0, burst=3) == (4, 0.0, 0.05)
    assert admissions_over_rate(over, rate_per_second=10.0, burst=3, jitter=0.05) is None
