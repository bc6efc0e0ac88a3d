"""``ledgerflow serve`` exposes /metrics: what it counted and the journal's gauges (open here:
the server runs without authentication; tests/web/test_serve_perimeter.py holds the secret).

A real server process over a SQLite journal: a signal it accepts is counted by outcome, a
start it makes is counted, and the gauges come from the journal (an UNKNOWN-free journal reads
zero). The exposition is Prometheus text, parsed as Prometheus would.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "observability"))
from scrape import scrape, value
from wait_workflows import registry

from ledgerflow import SyncEngine

pytestmark = pytest.mark.slow


def test_serve_metrics_counts_its_starts_and_deliveries(processes: Any) -> None:
    """Goal: /metrics on serve counts what the server did, exactly.

    Method: serve with the waiting workflows; start one instance over the API, signal it
    twice with one event id (accepted, then a duplicate), then scrape.
    """
    url, _ = processes.server("--insecure-no-auth", "--registry", "wait_workflows:registry")
    started = httpx.post(
        f"{url}/v1/instances", json={"workflow": "forever", "key": "k-1"}, timeout=30
    ).json()
    instance_id = started["instance"]["instance_id"]
    for _ in range(2):
        answer = httpx.post(
            f"{url}/v1/instances/{instance_id}/signals/go", json={"event_id": "e-1"}, timeout=30
        )
        assert answer.status_code in (200, 202), answer.text
    samples = scrape(f"{url}/metrics")
    started_total = "ledgerflow_instances_started_total"
    assert value(samples, started_total, workflow="forever", version="1") == 1
    assert value(samples, "ledgerflow_inbox_events_total", outcome="accepted") == 1
    assert value(samples, "ledgerflow_inbox_events_total", outcome="duplicate") == 1
    assert value(samples, "ledgerflow_unknown_outcomes_open") == 0
    with SyncEngine(processes.db_url, registry) as engine:
        assert engine.get(instance_id).workflow_name == "forever"
