"""``ledgerflow attention`` through the real entry point, in a subprocess, on a SQLite file.

The store is prepared through the store interface (a crash-looped instance parked by a claim,
a flag raised by hand); the command is run as a user runs it and its output read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ledger_records import started
from ledgerflow.model.ids import WorkerId
from ledgerflow.storage import open_store

WAIT_SECONDS_MAX = 60


def _ledgerflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from ledgerflow.cli.main import main; main()", *args]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS_MAX,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _prepare(path: Path) -> tuple[str, str, str]:
    store = open_store(f"sqlite:///{path}")
    ids = []
    for key, tenant, workflow in (("p", "t1", "order"), ("f", "t2", "refund"), ("u", "t1", "x")):
        record = started(store, key, tenant=tenant, workflow=workflow, now=1000.0 + len(ids))
        ids.append(record.instance_id)
    parked, flagged, unclaimed = ids
    # Parked by a claim: bound 1, one lapsed lease. The others are left unclaimed.
    store.claim(owner=WorkerId("w1"), now=1000.5, lease_seconds=1, limit=1, lease_expiries_max=1)
    store.claim(owner=WorkerId("w2"), now=1002.0, lease_seconds=1, limit=1, lease_expiries_max=1)
    store.raise_flag(
        instance_id=flagged,
        reason_code="stuck_step",
        evidence="no commit for 400.0s",
        detected_by="test",
        now=1500.0,
    )
    store.close()
    return parked, flagged, unclaimed


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_attention_lists_filters_and_scans(tmp_path: Path) -> None:
    """Goal: the command lists parked instances and open flags oldest first, filters them,
    prints a table for people, and ``--scan`` raises what the scan finds.

    Method: a parked instance (poison_crash_loop), a flagged one (stuck_step) and one never
    claimed; run ``attention`` with --json, with each filter, as a table, and with --scan and
    a 1 s unclaimed bound from LEDGERFLOW_DETECTION.
    """
    path = tmp_path / "journal.db"
    parked, flagged, unclaimed = _prepare(path)
    db = f"sqlite:///{path}"
    items = _json(_ledgerflow("attention", "--db", db, "--json"))["items"]
    assert [(i["kind"], i["instance_id"], i["reason_code"]) for i in items] == [
        ("parked", parked, "poison_crash_loop"),
        ("flag", flagged, "stuck_step"),
    ]
    assert "w1" in items[0]["reason"]
    assert items[1]["detected_by"] == "test"
    by_reason = _json(_ledgerflow("attention", "--db", db, "--json", "--reason", "stuck_step"))
    assert [i["instance_id"] for i in by_reason["items"]] == [flagged]
    by_tenant = _json(_ledgerflow("attention", "--db", db, "--json", "--tenant", "t1"))
    assert [i["instance_id"] for i in by_tenant["items"]] == [parked]
    by_workflow = _json(_ledgerflow("attention", "--db", db, "--json", "--workflow", "refund"))
    assert [i["instance_id"] for i in by_workflow["items"]] == [flagged]
    limited = _json(_ledgerflow("attention", "--db", db, "--json", "--limit", "1"))
    assert [i["instance_id"] for i in limited["items"]] == [parked]

    table = _ledgerflow("attention", "--db", db)
    assert table.returncode == 0, table.stderr
    assert "poison_crash_loop" in table.stdout
    assert "stuck_step" in table.stdout
    assert "oldest first" in table.stdout

    # No worker is registered here: no_capable_worker (tested on its own) is kept out of it.
    env = {"LEDGERFLOW_DETECTION": "unclaimed_after_seconds=1,unserved_after_seconds=1e12"}
    scanned = _json(_ledgerflow("attention", "--db", db, "--json", "--scan", env=env))
    raised = {(r["instance_id"], r["reason_code"]) for r in scanned["scan"]["raised"]}
    assert raised == {(flagged, "stuck_unclaimed"), (unclaimed, "stuck_unclaimed")}
    # The hand-raised stuck_step flag is not a scan finding now (nobody owns it): cleared.
    assert scanned["scan"]["cleared"] == [{"instance_id": flagged, "reason_code": "stuck_step"}]
    reasons = {(i["instance_id"], i["reason_code"]) for i in scanned["items"]}
    assert reasons == {
        (parked, "poison_crash_loop"),
        (flagged, "stuck_unclaimed"),
        (unclaimed, "stuck_unclaimed"),
    }


def test_attention_says_when_nothing_needs_attention(tmp_path: Path) -> None:
    """Goal: an empty queue is said in words, not shown as an empty table."""
    store = open_store(f"sqlite:///{tmp_path}/empty.db")
    store.close()
    result = _ledgerflow("attention", "--db", f"sqlite:///{tmp_path}/empty.db")
    assert result.returncode == 0, result.stderr
    assert "nothing needs attention" in result.stdout
