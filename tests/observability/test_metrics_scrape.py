"""Metrics: a scrape after a scripted run shows each counter moved by exactly what happened.

Real processes throughout: a participant service, a worker SIGKILLed right after its
participant applied a reservation (its answer dies with it), and a second worker with
``--metrics-port`` that takes the instance over, settles the lost answer by the participant's
lookup, parks an instance whose outcome only a person can settle, and runs a compensation.
The second worker's ``/metrics`` is then scraped and read sample by sample.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from observed_workflows import registry
from scrape import Samples, announced, scrape, value

from conditions import eventually
from ledgerflow import InstanceStatus, SyncEngine
from processes import LEDGERFLOW, SERVICE_URL_VARIABLE, child_environment

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
    ("ledgerflow_worker_slots", {"state": "busy"}, 0),
]

TERMINAL = {
    "reserve": InstanceStatus.SUCCEEDED,
    "legacy": InstanceStatus.MANUAL_INTERVENTION,
    "refunded": InstanceStatus.COMPENSATED,
}


@pytest.fixture
def metrics_worker(workers: Any) -> Iterator[Callable[[], str]]:
    """Starts a worker with metrics on (after the test's own work); its /metrics URL."""
    started: list[subprocess.Popen[str]] = []

    def start() -> str:
        env = child_environment(workers.path, **{SERVICE_URL_VARIABLE: workers.service.url})
        command = [
            *LEDGERFLOW,
            *("worker", workers.target, "--db", workers.db_url),
            *("--lease-seconds", "1", "--poll-seconds", "0.05"),
            *("--metrics-port", "0", "--metrics-signals-seconds", "0.1"),
        ]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        started.append(process)
        return announced(process, "METRICS ")

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def test_a_scrape_counts_exactly_what_happened(workers: Any, metrics_worker: Any) -> None:
    """Goal: every consistency signal of a scripted run reaches /metrics, counted once.

    Method: worker 1 is SIGKILLed after the inventory applied a reservation, before the answer
    was durable. Then a legacy effect (no lookup, no deduplication) gets an error instead of
    an answer, and a charge is followed by a failing step. Worker 2 (metrics on) finishes all
    three; its /metrics is scraped once the journal's gauges have been read.
    """
    with SyncEngine(workers.db_url, registry) as engine:
        reserve = engine.start("reserve", key="r-1", input={"sku": "A-1"})
        workers.killed_at(
            [{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": 1}}]
        )
        workers.service.rules({"participant": "legacy", "operation": "apply", "action": "fail"})
        legacy = engine.start("legacy", key="l-1", input={"what": "x"})
        refunded = engine.start("refunded", key="c-1", input={"amount": 5, "sku": "B-2"})
        url = metrics_worker()
        for started in (reserve, legacy, refunded):
            eventually(
                lambda s=started: (
                    engine.get(s.instance_id).status is TERMINAL[s.instance.workflow_name]
                ),
                what=f"{started.instance.workflow_name} to end as scripted",
            )

    samples = eventually(
        lambda: _with_gauges(scrape(url)), what="the journal's gauges read after the park"
    )

    moved = {
        (name, tuple(sorted(labels.items()))): expected
        for name, labels, expected in EXACTLY
        if value(samples, name, **labels) != expected
    }
    assert not moved, f"not moved as scripted (expected values): {moved}"
    # Nothing else ended, nothing else was settled, and nothing was fenced out.
    assert _total(samples, "ledgerflow_instances_ended_total") == 3
    assert _total(samples, "ledgerflow_unknown_outcomes_settled_total") == 1
    assert _total(samples, "ledgerflow_stale_writes_refused_total") == 0
    assert value(samples, "ledgerflow_unknown_outcome_oldest_age_seconds") > 0
    # Three claims (one a takeover), each with its lag; group commits measured.
    assert _total(samples, "ledgerflow_claim_lag_seconds_count") == 3
    assert value(samples, "ledgerflow_group_commit_batch_size_count") >= 1


def _total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def _with_gauges(samples: Samples) -> Samples | None:
    ready = value(samples, "ledgerflow_parked_instances", reason="effect_outcome_unknown") == 1
    return samples if ready else None
