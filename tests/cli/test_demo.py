"""``ledgerflow demo`` end to end, as a user runs it: a real process tree, then both ledgers.

The demo itself checks that no effect was applied twice; this test does not take its word for
it. It reads the participants' own SQLite ledgers and the engine's store directly.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ledgerflow import InstanceStatus, Registry, SyncEngine

pytestmark = pytest.mark.slow

DEMO_SECONDS_MAX = 90
PARTICIPANTS = ("inventory", "payment", "shipping", "email")


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def test_demo_applies_every_effect_once_despite_killed_workers(tmp_path: Path) -> None:
    """Goal: the demo's orders all succeed, through two SIGKILLed workers, with every effect
    applied exactly once at its participant. Method: run ``ledgerflow demo --orders 3`` as a
    subprocess; check its exit code and verdict line, that both planned kills happened, that
    each participant's own ledger holds every applied key once (and that payment did receive
    the re-sent charge, and shipping fenced the unsent shipment), and that the store holds
    three SUCCEEDED instances."""
    folder = tmp_path / "x"
    env = {k: v for k, v in os.environ.items() if k not in ("LEDGERFLOW_FAULTS", "LEDGERFLOW_DB")}
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledgerflow.cli.main import main; main()",
            "demo",
            "--dir",
            str(folder),
            "--orders",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=DEMO_SECONDS_MAX,
        env=env,
        check=False,
    )
    output = completed.stdout
    assert completed.returncode == 0, output + completed.stderr
    assert "no effect applied twice: OK" in output
    assert "killed at effect.after_dispatch, order-2 payment.charge" in output
    assert "killed at effect.before_dispatch, order-3 shipping.ship" in output
    # The instances table shows each step on a line of its own (issue 24: the demo's own line
    # breaks came out as a visible "\x0a" between the steps).
    assert "\\x0a" not in output
    assert any(
        line.split("│")[-2].split() == ["1", "total", "COMPLETED"]
        for line in output.splitlines()
        if line.count("│") > 2
    ), output

    for name in PARTICIPANTS:
        ledger = folder / f"{name}.participant.db"
        assert ledger.exists(), name
        twice = _rows(ledger, "SELECT key, count(*) FROM applied GROUP BY key HAVING count(*) > 1")
        assert twice == [], name
        assert _rows(ledger, "SELECT count(DISTINCT key) FROM applied") == [(3,)], name
    payment = folder / "payment.participant.db"
    # The charge whose outcome the killed worker never recorded was sent again, same key...
    assert _rows(payment, "SELECT count(*) FROM received") == [(4,)]
    # ...and the shipment that was never sent was fenced by the lookup before its re-send
    # (shipping deduplicates, so its fences are its participant kit's).
    fences = "SELECT key FROM ledgerflow_kit_keys WHERE fenced_up_to IS NOT NULL"
    assert len(_rows(folder / "shipping.participant.db", fences)) == 1

    with SyncEngine(f"sqlite:///{folder / 'ledgerflow.db'}", Registry()) as engine:
        instances = engine.list()
    assert sorted(i.business_key for i in instances) == ["order-1", "order-2", "order-3"]
    assert {i.status for i in instances} == {InstanceStatus.SUCCEEDED}
