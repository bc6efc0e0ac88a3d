"""The pure decision of flow control (model/flow.py): concurrency first, then a GCRA with a
burst and first-come reservations, re-checked at the slot; and the window check the oracle
uses."""

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

LIMIT = FlowLimit(scope="effect:api.send", rate_per_second=10.0, burst=3)


def _ask(limit: FlowLimit, key: KeyState, now: float, *, in_flight: int = 0, slot=None):  # type: ignore[no-untyped-def]
    return decide(limit, key, in_flight=in_flight, slot=slot, now=now, poll_seconds=0.05)


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
    # At its slot the reservation is admitted; before it, told to wait for it.
    early = _ask(LIMIT, key, 100.05, slot=100.1)
    assert (early.state, early.retry_at) == (AdmissionState.THROTTLED, 100.1)
    assert _ask(LIMIT, key, 100.1, slot=100.1).state is AdmissionState.ADMITTED


def test_a_newcomer_never_jumps_the_queue_of_reservations() -> None:
    key = KeyState(tat=100.0, queue_tat=100.5)  # reservations are held up to 100.4
    d = _ask(LIMIT, key, 100.0)
    assert (d.state, d.slot) == (AdmissionState.THROTTLED, 100.5)


def test_a_late_waker_is_checked_again_by_the_gcra() -> None:
    """Three reservations that all wake at once, late, are not all admitted at that instant
    beyond what the GCRA allows."""
    key = KeyState(tat=101.3, queue_tat=101.3)  # the key admitted up to its tolerance
    d = _ask(LIMIT, key, 101.0, slot=100.9)
    assert d.state is AdmissionState.THROTTLED
    assert d.retry_at == pytest.approx(101.1)


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
