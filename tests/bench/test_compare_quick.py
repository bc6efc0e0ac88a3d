"""``bench/compare.py --quick`` runs end to end and prints the JSON the issue specifies.

It runs once, as CI runs it, against both SQLite and PostgreSQL. Speed is not asserted here
(the machine is shared and noisy): only that every figure is there and is a positive number,
that both engines ran at the durability the harness claims, and that it cleaned up.
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
SCRIPT = ROOT / "bench" / "compare.py"
WORKLOADS = ("steps3_sequential", "steps3_concurrent", "effects3_concurrent", "recovery")
ENGINES = ("ledgerflow", "dbos")
RUN_SECONDS_MAX = 300  # --quick takes under a minute; this bound is only against a hang

# The module's first test also waits for the run (the fixture), whichever test that is.
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(RUN_SECONDS_MAX + 60)]


def postgres_url() -> str:
    url = os.environ.get("LEDGERFLOW_BENCH_POSTGRES_URL") or os.environ.get(
        "LEDGERFLOW_TEST_POSTGRES_URL"
    )
    if not url:
        pytest.skip(
            "the comparison needs PostgreSQL: set LEDGERFLOW_TEST_POSTGRES_URL "
            "(e.g. postgresql://postgres@127.0.0.1:5432/test)"
        )
    return url


@pytest.fixture(scope="module")
def run() -> tuple[dict[str, Any], int, str]:
    pytest.importorskip("dbos", reason="the comparison needs DBOS: pip install -e '.[bench]'")
    url = postgres_url()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=ROOT,
        env=dict(os.environ, LEDGERFLOW_BENCH_POSTGRES_URL=url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_SECONDS_MAX)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"bench/compare.py --quick hung: {err[-4000:]}")
    assert proc.returncode == 0, err[-4000:]
    last = out.strip().splitlines()[-1]
    # The orchestrator's pid names every schema it creates: none may be left.
    return json.loads(last), proc.pid, url


def numbers_in(value: Any, where: str) -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in numbers_in(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in numbers_in(v, f"{where}[{i}]")]
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [(where, float(value))]
    return []


def test_shape_and_positive_figures(run: tuple[dict[str, Any], int, str]) -> None:
    result, _, _ = run
    assert set(result) == {"sqlite", "postgres", "limits", "settings"}
    for backend in ("sqlite", "postgres"):
        section = result[backend]
        assert "skipped" not in section, section
        assert set(section) == set(WORKLOADS)
        for name in WORKLOADS:
            entry = section[name]
            for key in ("ledgerflow_wps", "dbos_wps", "ratio"):
                assert entry[key] > 0, (backend, name, key)
            assert set(entry["writes_per_workflow"]) == set(ENGINES)
            for engine in ENGINES:
                assert set(entry["start_latency_ms"][engine]) == {"p50", "p99"}
        assert section["effects3_concurrent"]["ratio_vs_dbos_steps3"] > 0
        figures = numbers_in(section, backend)
        assert figures
        # The server's background processes may well do nothing during a small run.
        zero_allowed = ".background_cpu_ms_server_wide"
        assert [f for f in figures if f[1] <= 0 and not f[0].endswith(zero_allowed)] == []
    # What PostgreSQL paid, per workflow, for both engines (compare_db_cost.py).
    for name in WORKLOADS:
        costs = result["postgres"][name]["db_cost_per_workflow"]
        assert set(costs) == set(ENGINES)
        for engine in ENGINES:
            assert costs[engine]["wal_bytes"] > 0
            # The server's CPU is read from its processes where they run on this machine.
            if costs[engine]["cpu_source"].startswith("/proc/"):
                assert costs[engine]["backend_cpu_ms"] > 0
            else:
                assert costs[engine]["cpu_source"].startswith("unavailable")
        assert result["sqlite"][name]["db_cost_per_workflow"] == {}
    limits = result["limits"]
    assert limits["sqlite"]["commits_per_second"] > 0
    assert limits["postgres"]["commits_per_second_1_client"] > 0
    assert limits["postgres"]["commits_per_second_8_clients"] > 0
    assert [f for f in numbers_in(limits, "limits") if f[1] <= 0] == []
    settings = result["settings"]
    assert len(settings["loadavg_before"]) == 3
    assert len(settings["loadavg_after"]) == 3


def test_durability_read_back(run: tuple[dict[str, Any], int, str]) -> None:
    durability = run[0]["settings"]["durability"]
    sqlite = durability["sqlite"]["read_back"]
    assert sqlite["ledgerflow"] == {"journal_mode": "wal", "synchronous": "full"}
    assert sqlite["dbos"] == {"journal_mode": "wal", "synchronous": "2"}  # 2 is FULL
    assert durability["postgres"]["read_back"]["dbos"] == {"synchronous_commit": "on"}
    assert run[0]["settings"]["postgres_server"]["synchronous_commit"] == "on"


def test_schemas_dropped(run: tuple[dict[str, Any], int, str]) -> None:
    import psycopg

    _, pid, url = run
    with psycopg.connect(url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
            (f"bench_compare_{pid}_%",),
        ).fetchall()
    assert left == []
