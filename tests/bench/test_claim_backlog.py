"""``bench/claim_backlog.py`` runs end to end, and the claim is served by its index (issue 29).

A small backlog on each backend (PostgreSQL when LEDGERFLOW_TEST_POSTGRES_URL is set). Speed is
not asserted (the machine is shared); what is: every rate is there and positive, the backlog was
claimed through the real claim path and parked, and the claim query's plan reads the partial
index of migration 0024 in its order, with no sort (and, on PostgreSQL, no JIT compilation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "claim_backlog.py"
RUN_SECONDS_MAX = 240  # a few seconds; the bound is only against a hang
SMALL = ["--sizes", "600", "1500", "--claims", "200", "--in-flight", "50"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS_MAX + 60)]


def run(backend: str, *extra: str) -> dict[str, Any]:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--backends", backend, *SMALL, *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS_MAX,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def check_rates(section: dict[str, Any]) -> None:
    assert set(section["sizes"]) == {"600", "1500"}
    for figures in section["sizes"].values():
        for kind in ("idle", "in_flight"):
            measured = figures[kind]
            assert measured["claimed"] == 200
            assert measured["claims_per_s"] > 0
            assert 0 < measured["claim_park_per_s"] <= measured["claims_per_s"]
        assert figures["in_flight"]["held_by_another_worker"] == 50
        assert figures["in_flight"]["intended_effects"] == 50
    ratio = section["rate_at_1500_over_600"]
    assert ratio["idle"]["claims_per_s"] > 0


def test_sqlite_backlog_claimed_through_the_index() -> None:
    section = run("sqlite")["sqlite"]
    check_rates(section)
    for figures in section["sizes"].values():
        for plan in (figures["idle"]["plan"], figures["in_flight"]["plan"]):
            lines = plan["query_plan"]
            assert any("USING INDEX lf_instances_claimable" in line for line in lines), lines
            assert not any("TEMP B-TREE" in line for line in lines), lines


@pytest.mark.postgres
def test_postgres_backlog_claimed_through_the_index() -> None:
    if not os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL"):
        pytest.skip("needs LEDGERFLOW_TEST_POSTGRES_URL")
    section = run("postgres")["postgres"]
    check_rates(section)
    for figures in section["sizes"].values():
        for plan in (figures["idle"]["plan"], figures["in_flight"]["plan"]):
            for mode in ("custom_plan", "generic_plan"):
                text = "\n".join(plan[mode])
                assert "Index Scan using lf_instances_claimable" in text, text
                # The due time bounds the scan: rows due later are never read.
                assert "Index Cond: (available_at <= $0)" in text, text
                assert "Sort" not in text, text
                assert "JIT" not in text, text


def test_sqlite_without_the_index_sorts() -> None:
    """The check above can fail: with 0024's index dropped the claim sorts."""
    section = run("sqlite", "--without-claim-index")["sqlite"]
    lines = section["sizes"]["1500"]["idle"]["plan"]["query_plan"]
    assert any("TEMP B-TREE" in line for line in lines), lines
