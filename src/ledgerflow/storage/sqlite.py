"""The SQLite dialect: one file, WAL, durable commits, migrations applied on open (internal).

Durability: the default is ``journal_mode=WAL`` with ``synchronous=FULL``, which syncs the WAL
on every commit, so an acknowledged step survives power loss. ``?synchronous=normal`` in the
URL is the explicit faster setting: still safe against a process crash, but the last commits
may be lost on power loss.

A file that is not a database, or a database that is not Ledgerflow's, is refused before
anything is written to it: the identity check reads ``PRAGMA application_id`` and the table
list, and only a file that is ours or empty is configured and migrated.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import (
    ConcurrencyError,
    ConfigurationError,
    ForeignDatabaseError,
    SchemaVersionError,
    StorageCorruptError,
    StorageError,
    StorageUnavailableError,
)
from ledgerflow.storage import queries
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_store import SqlStore

# "LFLW" as a big-endian integer: marks a SQLite file as a Ledgerflow journal.
APPLICATION_ID = 0x4C464C57
# "off" is for simulations only: it survives a process crash but not an OS crash.
SYNCHRONOUS_MODES = ("full", "normal", "extra", "off")


def _map_error(exc: sqlite3.Error, path: str) -> StorageError | ConcurrencyError:
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        return ConcurrencyError(f"conflicting write refused by the store: {text}")
    if isinstance(exc, sqlite3.OperationalError) and (
        "locked" in text or "busy" in text or "unable to open" in text
    ):
        return StorageUnavailableError(f"SQLite store unavailable: {text}", path=path)
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return StorageCorruptError(f"{path} is not a readable database: {text}", path=path)
    return StorageError(f"SQLite error: {text}", path=path)


class SqliteStore(SqlStore):
    """A Ledgerflow journal in one SQLite file."""

    embedded = True

    def __init__(self, path: str, *, synchronous: str = "full") -> None:
        super().__init__(queries.load("sqlite"))
        if synchronous not in SYNCHRONOUS_MODES:
            raise ConfigurationError(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, got {synchronous!r}"
            )
        self.path = path
        self.url = f"sqlite:///{path}"
        self.synchronous = synchronous
        # The runtime uses a store from one thread; the lock makes other callers (a CLI, a
        # sync client) safe too, since a sqlite3 connection must not be used concurrently.
        self._lock = threading.RLock()
        self._conn = self._connect()

    def _connect(self) -> sqlite3.Connection:
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise StorageUnavailableError(f"folder {folder} does not exist", path=self.path)
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0
            )
        except sqlite3.Error as exc:
            raise _map_error(exc, self.path) from None
        conn.row_factory = sqlite3.Row
        try:
            conn.execute(f"PRAGMA busy_timeout = {limits.SQLITE_BUSY_TIMEOUT_MS}")
            self._identify(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise _map_error(exc, self.path) from None
        except StorageError:
            conn.close()
            raise
        return conn

    def _identify(self, conn: sqlite3.Connection) -> None:
        """Refuse a file that is not ours before writing anything to it."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        if app_id == APPLICATION_ID:
            return
        if app_id == 0 and not tables:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            return
        raise ForeignDatabaseError(
            f"{self.path} is a database that Ledgerflow did not create "
            f"(application_id={app_id}, tables: {', '.join(tables[:5]) or 'none'}); "
            "it was left untouched",
            path=self.path,
        )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS lf_schema_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, "
                "applied_at REAL NOT NULL)"
            )
            applied = {
                int(r["version"]): (r["name"], r["checksum"])
                for r in conn.execute("SELECT * FROM lf_schema_migrations")
            }
            known = queries.migrations("sqlite")
            newest = max((n for n, _, _ in known), default=0)
            if applied and max(applied) > newest:
                raise SchemaVersionError(
                    f"{self.path} has schema version {max(applied)}, newer than this "
                    f"Ledgerflow knows ({newest}); upgrade Ledgerflow",
                    path=self.path,
                )
            for number, name, text in known:
                checksum = hashlib.sha256(text.encode()).hexdigest()
                if number in applied:
                    if applied[number][1] != checksum:
                        raise SchemaVersionError(
                            f"migration {number:04d}_{name} was changed after it was applied",
                            path=self.path,
                        )
                    continue
                for statement in _statements(text):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO lf_schema_migrations VALUES (?, ?, ?, ?)",
                    (number, name, checksum, time.time()),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def schema_version(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT max(version) FROM lf_schema_migrations").fetchone()
        return int(row[0] or 0)

    # -- dialect hooks -----------------------------------------------------------------------

    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        try:
            cursor = self._conn.execute(self._q[name], params)
            rows: list[Row] = cursor.fetchall()
        except sqlite3.Error as exc:
            raise _map_error(exc, self.path) from None
        return rows, cursor.rowcount

    @contextlib.contextmanager
    def _write_transaction(self) -> Iterator[None]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _map_error(exc, self.path) from None
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise _map_error(exc, self.path) from None

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        with self._lock:
            self._conn.execute("BEGIN DEFERRED")
            try:
                yield
            finally:
                self._conn.execute("COMMIT")

    @contextlib.contextmanager
    def _savepoint(self, name: str) -> Iterator[None]:
        self._conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self._conn.execute(f"ROLLBACK TO {name}")
            self._conn.execute(f"RELEASE {name}")
            raise
        self._conn.execute(f"RELEASE {name}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _statements(script: str) -> list[str]:
    """Split a migration into statements (migrations hold no semicolons inside literals)."""
    body = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]
