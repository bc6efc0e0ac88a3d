"""``bench/round_trips.py`` counts the store's work for one signal through the HTTP API; the
one write path keeps it at one write transaction (claim of the Idempotency-Key, delivery,
audit record and kept answer together) and one read (the token), where it was four writes and
four reads before the changes from outside became one transaction each (issue 25)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "round_trips.py"


def test_a_signal_through_the_api_is_one_write_transaction() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    counted = json.loads(done.stdout)
    assert counted["write_transactions"] == 1, counted
    assert counted["transactions"] <= 3, counted
    # The change and everything that must commit with it are in that one transaction.
    for statement in ("reserve_idempotency", "insert_event_delivery", "insert_audit"):
        assert counted["by_statement"][statement] == 1, statement
    assert counted["by_statement"]["finish_idempotency"] == 1
