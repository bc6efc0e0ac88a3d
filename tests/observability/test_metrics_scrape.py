"""Metrics: a scrape after the scripted run (``conftest.scripted``) shows each counter moved
by exactly what happened: a takeover after SIGKILL, a lost answer settled by lookup, a park, a
compensation, a retried step and a refused posting."""

from __future__ import annotations

import pytest
from scrape import Samples, value
from scripted_run import ScriptedRun

pytestmark = pytest.mark.slow

_RESERVE = {"participant": "inventory", "operation": "reserve"}
_LEGACY = {"participant": "legacy", "operation": "apply"}
# Every sample the scripted run must move, and by exactly how much.
EXACTLY: list[tuple[str, dict[str, str], float]] = [
    # The takeover after SIGKILL, and the answer lost with the worker, settled by the lookup.
    ("ledgerflow_lease_takeovers_total", {"workflow": "reserve", "version": "1"}, 1),
    ("ledgerflow_unknown_outcomes_opened_total", _RESERVE, 1),
    ("ledgerflow_unknown_outcomes_settled_total", {**_RESERVE, "how": "lookup"}, 1),
    ("ledgerflow_effects_total", {**_RESERVE, "outcome": "confirmed"}, 1),
    # The park: an UNKNOWN outcome nobody but a person can settle.
    ("ledgerflow_unknown_outcomes_opened_total", _LEGACY, 1),
    ("ledgerflow_effects_total", {**_LEGACY, "outcome": "unknown"}, 1),
    ("ledgerflow_effect_dispatch_seconds_count", {**_LEGACY, "outcome": "no_proof"}, 1),
    (
        "ledgerflow_instances_parked_total",
        {"workflow": "legacy", "version": "1", "reason": "effect_outcome_unknown"},
        1,
    ),
    ("ledgerflow_parked_instances", {"reason": "effect_outcome_unknown"}, 1),
    ("ledgerflow_unknown_outcomes_open", {}, 1),
    # The compensation: the charge confirmed, the step failed once, the refund confirmed.
    (
        "ledgerflow_effects_total",
        {"participant": "payment", "operation": "charge", "outcome": "confirmed"},
        1,
    ),
    (
        "ledgerflow_steps_total",
        {"workflow": "refunded", "version": "1", "kind": "local", "outcome": "failed"},
        1,
    ),
    (
        "ledgerflow_compensations_total",
        {"participant": "payment", "operation": "refund", "outcome": "confirmed"},
        1,
    ),
    # Each instance ended once, as scripted.
    *(
        ("ledgerflow_instances_ended_total", {"workflow": w, "version": "1", "status": s}, 1)
        for w, s in (
            ("reserve", "SUCCEEDED"),
            ("legacy", "MANUAL_INTERVENTION"),
            ("refunded", "COMPENSATED"),
        )
    ),
    # The step that failed once and was retried, and the posting refused for good.
    (
        "ledgerflow_steps_total",
        {"workflow": "flaky", "version": "1", "kind": "local", "outcome": "retried"},
        1,
    ),
    (
        "ledgerflow_effects_total",
        {"participant": "books", "operation": "post", "outcome": "failed"},
        1,
    ),
    (
        "ledgerflow_instances_ended_total",
        {"workflow": "flaky", "version": "1", "status": "SUCCEEDED"},
        1,
    ),
    (
        "ledgerflow_instances_ended_total",
        {"workflow": "posted", "version": "1", "status": "FAILED"},
        1,
    ),
    # The step that failed once and was retried, and the posting refused for good.
    (
        "ledgerflow_steps_total",
        {"workflow": "flaky", "version": "1", "kind": "local", "outcome": "retried"},
        1,
    ),
    (
        "ledgerflow_effects_total",
        {"participant": "books", "operation": "post", "outcome": "failed"},
        1,
    ),
    (
        "ledgerflow_instances_ended_total",
        {"workflow": "flaky", "version": "1", "status": "SUCCEEDED"},
        1,
    ),
    (
        "ledgerflow_instances_ended_total",
        {"workflow": "posted", "version": "1", "status": "FAILED"},
        1,
    ),
    ("ledgerflow_worker_slots", {"state": "busy"}, 0),
]


def test_a_scrape_counts_exactly_what_happened(scripted: ScriptedRun) -> None:
    """Goal: every consistency signal of the scripted run (conftest) reaches /metrics,
    counted exactly once.

    Method: the scrape taken once every instance ended as scripted and the journal's gauges
    were read; each sample the run must move is compared with what happened.
    """
    samples = scripted.samples
    moved = {
        (name, tuple(sorted(labels.items()))): expected
        for name, labels, expected in EXACTLY
        if value(samples, name, **labels) != expected
    }
    assert not moved, f"not moved as scripted (expected values): {moved}"
    # Nothing else ended, nothing else was settled, and nothing was fenced out.
    assert _total(samples, "ledgerflow_instances_ended_total") == 5
    assert _total(samples, "ledgerflow_unknown_outcomes_settled_total") == 1
    assert _total(samples, "ledgerflow_stale_writes_refused_total") == 0
    assert value(samples, "ledgerflow_unknown_outcome_oldest_age_seconds") > 0
    # Five claims (one a takeover), each with its lag; group commits measured.
    assert _total(samples, "ledgerflow_claim_lag_seconds_count") == 5
    assert value(samples, "ledgerflow_group_commit_batch_size_count") >= 1


def _total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)
