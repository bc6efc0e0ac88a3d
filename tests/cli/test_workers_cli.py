"""``ledgerflow workers`` through the real entry point, in a subprocess, on a SQLite file.

Workers are registered through the store as a worker process registers itself; the command
is run as a user runs it and its output read back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.ids import WorkerId
from ledgerflow.model.routing import Served
from ledgerflow.storage import open_store

WAIT_SECONDS_MAX = 60


def _workers(db: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from ledgerflow.cli.main import main; main()"]
    return subprocess.run(
        [*command, "workers", "--db", db],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS_MAX,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_workers_says_when_none_is_live_and_lists_the_live_ones(tmp_path: Path) -> None:
    """Goal: with no live worker the command says nothing runs; with one, its row shows the
    slots and each definition it serves with its fingerprint; a stopped one is not shown.

    Method: run the command on a fresh journal, then after registering one worker and one
    that signed off.
    """
    db = f"sqlite:///{tmp_path}/journal.db"
    store = open_store(db)
    first = _workers(db)
    assert (first.returncode, first.stdout.strip()) == (
        0,
        "no live worker: nothing runs until one starts",
    )
    now = time.time()
    for name in ("w-live", "w-stopped"):
        store.register_worker(
            WorkerRecord(
                worker_id=WorkerId(name),
                host="h",
                pid=7,
                started_at=now,
                slots=12,
                heartbeat_at=now,
                serves=(Served("order", 1, "f1" * 16), Served("order", 2, "f2" * 16)),
            ),
            now=now,
        )
    store.stop_worker(WorkerId("w-stopped"), now=now)
    store.close()
    listed = _workers(db)
    assert listed.returncode == 0, listed.stderr
    assert "w-live" in listed.stdout
    assert "w-stopped" not in listed.stdout
    assert f"order v2 (fingerprint {'f2' * 16})" in listed.stdout
    assert "12" in listed.stdout
