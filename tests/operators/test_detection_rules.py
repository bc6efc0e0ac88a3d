"""The pure detection rules: bounds, streaks, crash-loop counts and the stuck conditions."""

from __future__ import annotations

import dataclasses

import pytest

from ledgerflow.errors import ConfigurationError
from ledgerflow.model import detection
from ledgerflow.model.detection import DEFAULT_BOUNDS, DetectionBounds


def test_bounds_have_named_defaults_and_parse_from_text() -> None:
    """Goal: every bound has a name and a default; a worker's text configuration overrides
    some and keeps the rest; nonsense is refused with the bound's name."""
    assert DEFAULT_BOUNDS.crash_loop_lease_expiries == 3
    assert DEFAULT_BOUNDS.poison_step_attempts == 5
    assert DEFAULT_BOUNDS.step_deadline_seconds == 300
    assert DEFAULT_BOUNDS.unclaimed_after_seconds == 300
    assert DEFAULT_BOUNDS.participant_silent_seconds == 120
    parsed = DetectionBounds.parse("poison_step_attempts=7, participant_silent_seconds=2.5")
    assert parsed.poison_step_attempts == 7
    assert parsed.participant_silent_seconds == 2.5
    assert parsed.step_deadline_seconds == 300
    with pytest.raises(ConfigurationError, match="unknown detection bound 'nope'"):
        DetectionBounds.parse("nope=1")
    with pytest.raises(ConfigurationError, match="not a number"):
        DetectionBounds.parse("poison_step_attempts=many")
    with pytest.raises(ConfigurationError, match="must be positive"):
        DetectionBounds(step_deadline_seconds=0)


def test_failure_streak_counts_the_same_error_in_a_row() -> None:
    """Goal: only the same type and message continue a streak; anything else starts over."""
    error = {"type": "ValueError", "message": "no sku"}
    assert detection.failure_streak(None, error) == 1
    assert detection.failure_streak({**error, "repeated": 4}, error) == 5
    assert detection.failure_streak({**error, "message": "other"}, error) == 1
    assert detection.failure_streak({**error, "type": "KeyError", "repeated": 4}, error) == 1
    # An error journaled before streaks were counted counts as one.
    assert detection.failure_streak(error, error) == 2
    assert detection.is_poison_step(5, DEFAULT_BOUNDS)
    assert not detection.is_poison_step(4, DEFAULT_BOUNDS)


def test_crash_loop_parks_at_the_bound_and_isolates_the_last_chance() -> None:
    """Goal: parking at the bound; the run before it is the last chance (run alone)."""
    assert [detection.is_crash_loop(n, lease_expiries_max=3) for n in range(5)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert [detection.is_last_chance(n, 3) for n in range(4)] == [False, False, True, False]
    # With a bound of 1 there is no earlier run to isolate: the first lapse parks.
    assert not detection.is_last_chance(0, 1)
    reason = detection.crash_loop_reason(3, ["w-1", "w-2"])
    assert "3 times in a row" in reason
    assert "w-1, w-2" in reason


def test_stuck_rules_decide_from_row_values() -> None:
    """Goal: each stuck rule fires past its bound only, with evidence a person can act on."""
    bounds = DetectionBounds(
        step_deadline_seconds=60, unclaimed_after_seconds=30, participant_silent_seconds=10
    )
    owned = detection.QuietInstance(
        instance_id="i",
        status="RUNNING",
        owner="w",
        lease_expires_at=1005.0,
        updated_at=900.0,
        step_seq=2,
        step_name="price",
        step_status="RETRY_SCHEDULED",
        step_attempt=3,
    )
    finding = detection.stuck_step(owned, now=1000.0, bounds=bounds)
    assert finding is not None
    assert "no commit for 100.0s" in finding.evidence
    assert "step 2 (price) is RETRY_SCHEDULED at attempt 3" in finding.evidence
    recently = dataclasses.replace(owned, updated_at=950.0)
    assert detection.stuck_step(recently, now=1000.0, bounds=bounds) is None
    lapsed = dataclasses.replace(owned, lease_expires_at=999.0)
    assert detection.stuck_step(lapsed, now=1000.0, bounds=bounds) is None
    due = detection.DueInstance(
        instance_id="j", status="RUNNING", owner=None, lease_expires_at=None, available_at=980.0
    )
    assert detection.stuck_unclaimed(due, now=1000.0, bounds=bounds) is None
    late = detection.stuck_unclaimed(
        dataclasses.replace(due, available_at=900.0), now=1000.0, bounds=bounds
    )
    assert late is not None
    assert "due for 100.0s" in late.evidence
    effect = detection.SilentEffect(
        instance_id="k",
        participant="bank",
        operation="charge",
        idempotency_key="key-1",
        attempt=2,
        state="ACCEPTED",
        updated_at=985.0,
    )
    silent = detection.participant_unresponsive([effect], now=1000.0, bounds=bounds)
    assert silent is not None
    assert "bank.charge key key-1 attempt 2 ACCEPTED since 15.0s ago" in silent.evidence
    recent = dataclasses.replace(effect, updated_at=995.0)
    assert detection.participant_unresponsive([recent], now=1000.0, bounds=bounds) is None


def test_stuck_arrival_fires_past_its_bound_and_names_what_is_held() -> None:
    """Goal: a held arrival younger than the bound is not a finding (the instance may be about
    to take it); past it, the evidence names each arrival and when the instance is due."""
    bounds = DetectionBounds(arrival_unanswered_seconds=30)
    assert DEFAULT_BOUNDS.arrival_unanswered_seconds == 30
    event = detection.HeldArrival(
        instance_id="i",
        available_at=1e15,
        arrival=detection.ARRIVAL_EVENT,
        arrived_at=1000.0,
        name="approved",
        event_id="e-1",
        seq=3,
    )
    cancel = detection.HeldArrival(
        instance_id="i", available_at=1e15, arrival=detection.ARRIVAL_CANCEL, arrived_at=1010.0
    )
    assert detection.stuck_arrival([event, cancel], now=1020.0, bounds=bounds) is None
    finding = detection.stuck_arrival([event, cancel], now=1045.0, bounds=bounds)
    assert finding is not None
    assert finding.reason_code == detection.STUCK_ARRIVAL
    assert "event 'approved' (e-1) for step 3, received 45.0s ago" in finding.evidence
    assert "a cancel request" in finding.evidence
    assert "due never" in finding.evidence
    timer = dataclasses.replace(event, available_at=4600.0, arrival=detection.ARRIVAL_COMPLETION)
    finding = detection.stuck_arrival([timer], now=1045.0, bounds=bounds)
    assert finding is not None
    assert "due in 3555.0s" in finding.evidence
    assert "completion callback 'approved'" in finding.evidence
