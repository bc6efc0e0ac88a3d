"""A sample participant's own SQLite file: one write transaction at a time (internal).

The demo's participants keep their records in files of their own, never in Ledgerflow's
journal. A write takes the process's lock, then the file's write lock (``BEGIN IMMEDIATE``),
so that what it reads inside the transaction is what it commits against, across threads and
processes alike.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def write_transaction(db: sqlite3.Connection, lock: threading.Lock) -> Iterator[sqlite3.Connection]:
    """``db`` inside ``BEGIN IMMEDIATE``, committed at the block's end, rolled back on error."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
