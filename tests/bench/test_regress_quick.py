"""``bench/regress.py --quick`` runs end to end against a base and prints both sides' figures.

Run against ``HEAD`` (a base every checkout has), as CI runs it: speed is not asserted (the
machine is shared and noisy, and both sides are the same code), only that every workload ran
on both sides of each backend with positive figures and a spread, that the base really was
its own checkout, and that the temporary worktree is gone afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "regress.py"
WORKLOADS = {"steps3_sequential", "steps3_concurrent", "effects3_concurrent", "recovery"}
RUN_SECONDS_MAX = 400

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_SECONDS_MAX + 60)]


def test_quick_against_head() -> None:
    url = os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL")
    backends = ["sqlite", "postgres"] if url else ["sqlite"]
    command = [sys.executable, str(SCRIPT), "--base", "HEAD", "--quick", "--backends", *backends]
    if url:
        command += ["--postgres-url", url]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_SECONDS_MAX, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert result["base_commit"] == head
    assert result["head"].startswith(head)
    assert set(result["results"]) == set(backends)
    for backend in backends:
        section = result["results"][backend]
        assert set(section) == WORKLOADS
        for name, entry in section.items():
            for side in ("base", "head"):
                wps = entry[side]["wps"]
                assert wps["min"] > 0, (backend, name, side)
                assert wps["min"] <= wps["median"] <= wps["max"]
                assert entry[side]["start_p99_ms"]["median"] > 0
            assert entry["head_vs_base"]["wps"] > 0
    assert len(result["runs"]) == 2 * len(WORKLOADS) * len(backends)
    assert len(result["settings"]["loadavg_before"]) == 3
    # Its own checkout is gone, folder and all (other runs may have theirs meanwhile).
    worktrees = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert result["base_folder"] not in worktrees
    assert not Path(result["base_folder"]).exists()
