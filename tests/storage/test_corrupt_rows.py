"""Rows that break the ledger's invariants are reported with their identity, not acted on.

Each test writes a row through the store, then damages it with a separate sqlite3 connection
(as a hand edit or a foreign writer would), and reads it back through the store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger_records import new, started
from ledgerflow.errors import StorageCorruptError
from ledgerflow.model.ids import WorkerId
from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store

# The instances the fixture and a test start (ledger_records names them by business key).
FIRST = new("1").instance_id
SECOND = new("2").instance_id


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
def store(path: Path) -> Store:
    store = open_store(f"sqlite:///{path}")
    started(store, "1", now=1.0)
    return store


def _damage(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(sql)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("UPDATE lf_instances SET status = 'BOGUS'", "'BOGUS' is not a valid InstanceStatus"),
        ("UPDATE lf_instances SET status = 'SUCCEEDED'", "SUCCEEDED without a result"),
        (
            "UPDATE lf_instances SET status = 'FAILED', owner = 'w-9'",
            "FAILED but still owned by w-9",
        ),
        ("UPDATE lf_instances SET generation = -1", "negative generation"),
    ],
)
def test_damaged_instance_row_is_reported(store: Store, path: Path, sql: str, message: str) -> None:
    """Every read of a damaged instance row raises StorageCorruptError naming the row."""
    _damage(path, sql)
    with pytest.raises(StorageCorruptError, match=message) as error:
        store.get_instance(FIRST)
    assert error.value.code == "LF202"
    assert FIRST in str(error.value)
    with pytest.raises(StorageCorruptError):
        store.list_instances()


def test_damaged_row_is_not_claimed_and_does_not_block_others(store: Store, path: Path) -> None:
    """A claim skips a damaged row (leaving it unowned and unchanged) and still hands out the
    healthy instances behind it."""
    started(store, "2", now=1.0)
    _damage(path, f"UPDATE lf_instances SET run = 'one' WHERE instance_id = '{FIRST}'")
    claimed = store.claim(owner=WorkerId("w"), now=2.0, lease_seconds=5, limit=5)
    assert [r.instance_id for r in claimed] == [SECOND]
    conn = sqlite3.connect(path)
    try:
        owner, generation = conn.execute(
            f"SELECT owner, generation FROM lf_instances WHERE instance_id = '{FIRST}'"
        ).fetchone()
    finally:
        conn.close()
    assert owner is None
    assert generation == 0
