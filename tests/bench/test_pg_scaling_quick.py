"""``bench/pg_scaling.py`` runs in its quick forms and prints its JSON; speed is not asserted.

Both ways of running the worker processes, on PostgreSQL: W bench workers (whose own figures
say every effect key was applied once) and ``ledgerflow worker --processes W`` (the command a
user runs). Only that every run finished, with the figures there and positive, is checked: the
machine is shared and noisy, so a speed or a speed-up would be a test that fails by luck.
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
SCRIPT = ROOT / "bench" / "pg_scaling.py"
RUN_SECONDS_MAX = 300

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(RUN_SECONDS_MAX + 60)]


def run(*arguments: str) -> dict[str, Any]:
    url = os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("pg_scaling needs PostgreSQL: set LEDGERFLOW_TEST_POSTGRES_URL")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--base-url", url, *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS_MAX,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_supervised_processes() -> None:
    result = run("--supervisor", "--workers", "1", "2")
    assert result["launch"] == "ledgerflow worker --processes W"
    assert set(result["results"]) == {"1", "2"}
    for entry in result["results"].values():
        assert entry["all_succeeded"] is True
        assert entry["workflows_per_second"] > 0
        assert entry["worker_exit_codes"] == [0]
        assert entry["ready_skew_seconds"] >= 0
    assert len(result["results"]["2"]["worker_cpu_fraction"]) == 2


def test_separate_bench_workers() -> None:
    result = run("--workers", "2", "--instances", "100")
    [entry] = result["results"].values()
    assert entry["all_succeeded"] is True
    assert entry["workflows_per_second"] > 0
    assert entry["worker_exit_codes"] == [0, 0]
    # Each worker keeps its own participant's books: 2 effects per workflow, each key once.
    assert entry["effect_keys"] == 200
    assert entry["effect_keys_called_twice"] == 0
