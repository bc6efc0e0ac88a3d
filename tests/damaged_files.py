"""Damaging a SQLite journal the way a disk or a bad copy would, for the tests that need one."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def damage_instances_table(path: Path) -> None:
    """Overwrite the root page of lf_instances with garbage; the rest of the file stays (the
    schema and the migration record still read, so the store opens and its reads fail)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'lf_instances'"
        ).fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * page)
        file.write(b"\xa5" * page)
