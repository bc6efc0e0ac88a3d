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
    Standing,
    Waiter,
    checked_priority,
    fairness_bound,
    standing,
    start_tag,
)

LIMIT = FlowLimit(scope="effect:api.send", rate_per_second=10.0, burst=3)
ALONE = Standing()


def _ask(limit: FlowLimit, key: KeyState, now: float, *, in_flight: int = 0, slot=None,  # type: ignore[no-untyped-def]
         stands: Standing = ALONE):  # fmt: skip
    return decide(
        limit, key, in_flight=in_flight, slot=slot, standing=stands, tag=key.vtime, now=now,
        poll_seconds=0.05,
    )  # fmt: skip


def test_a_burst_at_once_then_reservations_one_interval_apart() -> None:
    key = KeyState()
    admitted, slots = 0, []
    for _ in range(6):
        d = _ask(LIMIT, key, 100.0)
        key = d.key_state
        if d.state is AdmissionState.ADMITTED:
            admitted += 1
        else:
            assert d.reason == "rate"
            slots.append(d.slot)
    assert admitted == 3
    assert slots == pytest.approx([100.1, 100.2, 100.3])
    early = _ask(LIMIT, key, 100.05, slot=100.1)
    assert (early.state, early.retry_at) == (AdmissionState.THROTTLED, 100.1)
    assert _ask(LIMIT, key, 100.1, slot=100.1).state is AdmissionState.ADMITTED


def test_a_newcomer_that_comes_first_takes_the_first_slot_behind_it() -> None:
    """A waiter of higher priority (or smaller fair tag) takes the earliest slot held by
    waiters after it; theirs (and the reservations' end) move one interval on."""
    key = KeyState(tat=100.1, queue_tat=100.5)
    d = _ask(LIMIT, key, 100.0, stands=Standing(behind_slot=100.2))
    assert (d.state, d.reason, d.slot, d.shift_from) == (
        AdmissionState.THROTTLED, "order", 100.2, 100.2,
    )  # fmt: skip
    assert d.key_state.queue_tat == pytest.approx(100.6)
    plain = _ask(LIMIT, key, 100.0)
    assert (plain.slot, plain.shift_from) == (100.5, None)


def test_due_waiters_go_in_order_and_higher_priority_first() -> None:
    key = KeyState(tat=101.0, queue_tat=101.0)
    # Two due before it: told to ask again two intervals after the next grant.
    d = _ask(LIMIT, KeyState(tat=101.3), 101.0, slot=100.5, stands=Standing(due_ahead=2))
    assert (d.state, d.reason) == (AdmissionState.THROTTLED, "rate")
    assert d.retry_at == pytest.approx(101.3)
    # The grant is free, but a due waiter comes first (of higher priority, or another
    # fairness key): it waits for it.
    blocked = _ask(LIMIT, key, 101.0, slot=100.5, stands=Standing(ahead=1, due_ahead=1))
    assert (blocked.state, blocked.reason) == (AdmissionState.THROTTLED, "order")
    assert _ask(LIMIT, key, 101.0, slot=100.5).state is AdmissionState.ADMITTED


def test_a_late_waker_is_checked_again_by_the_gcra() -> None:
    key = KeyState(tat=101.3, queue_tat=101.3)  # the key admitted up to its tolerance
    d = _ask(LIMIT, key, 101.0, slot=100.9)
    assert d.state is AdmissionState.THROTTLED
    assert d.retry_at == pytest.approx(101.1)


def test_without_a_rate_only_the_first_in_order_is_admitted() -> None:
    limit = FlowLimit(scope="effect:api.send", concurrency_max=3)
    d = _ask(limit, KeyState(), 5.0, in_flight=1, stands=Standing(ahead=1))
    assert (d.state, d.reason, d.retry_at) == (AdmissionState.THROTTLED, "order", 5.05)
    assert _ask(limit, KeyState(), 5.0, in_flight=1).state is AdmissionState.ADMITTED


def test_the_order_is_priority_then_fair_tag_then_arrival() -> None:
    def w(effect: str, priority: int, tag: float, since: float, retry: float = 10.0,
          slot: float | None = None, fair: str = "x") -> Waiter:  # fmt: skip
        return Waiter(effect, 1, priority, tag, since, retry, slot, fair)

    low_early, high_late = w("a", 2, 0.0, 1.0, slot=9.0), w("b", 4, 5.0, 9.0, slot=11.0)
    same_tag_later = w("c", 2, 0.0, 2.0, slot=12.0, fair="y")
    waiters = [low_early, high_late, same_tag_later]
    assert standing(high_late, waiters, now=10.0) == Standing(
        ahead=0, behind_slot=9.0, least_tag=0.0
    )
    assert standing(low_early, waiters, now=10.0) == Standing(
        ahead=1, behind_slot=12.0, least_tag=0.0
    )
    last = standing(same_tag_later, waiters, now=10.0)
    assert (last.ahead, last.due_ahead, last.due_higher) == (2, 1, 0)
    # One of its own priority and fairness key (a, due) does not hold it back: they race for a
    # grant; b (higher priority) and c (another fairness key) do.
    twin = standing(w("e", 2, 0.0, 3.0, slot=12.5), waiters, now=10.0)
    assert (twin.ahead, twin.due_ahead) == (2, 0)
    # A waiter silent long past its time is not waited for.
    stale = w("d", 5, 0.0, 0.0, retry=10.0 - WAITER_STALE_SECONDS - 0.1, slot=8.0)
    assert standing(high_late, [*waiters, stale], now=10.0).silent == 1


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


def test_the_virtual_time_never_passes_a_waiting_tag() -> None:
    """Waiters of one kind may be admitted out of tag order (they race for a grant): the key's
    virtual time stays at the smallest tag still waiting, so a newcomer key is not put behind
    the waiters passed."""
    assert Standing(least_tag=3.0).vtime_after(1.0, 20.0) == 3.0
    assert Standing().vtime_after(1.0, 20.0) == 20.0
    assert Standing(least_tag=30.0).vtime_after(25.0, 20.0) == 25.0


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
