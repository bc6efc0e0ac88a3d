"""The SQLite dialect: one file, WAL, durable commits, migrations applied on open (internal).

Durability: the default is ``journal_mode=WAL`` with ``synchronous=FULL``, which syncs the WAL
on every commit, so an acknowledged step survives power loss. ``?synchronous=normal`` in the
URL is the explicit faster setting: still safe against a process crash, but the last commits
may be lost on power loss.

A file that is not a database, or a database that is not Ledgerflow's, is refused before
anything is written to it: the identity check reads ``PRAGMA application_id`` and the table
list, and only a file that is ours or an empty database is configured and migrated. A new
journal is built under a scratch name and linked into place whole, so a zero-byte file at the
path is never a journal being born: it is refused as damaged (a truncated journal set up
afresh would restart every business key). An existing file is opened without the right to
create one, and a store opened with ``migrate=False`` writes nothing on open at all.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import (
    ConcurrencyError,
    ConfigurationError,
    ForeignDatabaseError,
    StorageCorruptError,
    StorageError,
    StorageUnavailableError,
    StoreNotFoundError,
)
from ledgerflow.storage import migrations, queries
from ledgerflow.storage.migrations import MigrationStatus, OnOpen
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.storage.wake_sources import SqliteWatch, WakeSource, push_wakeups_enabled

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
    """A Ledgerflow journal in one SQLite file.

    ``on_open`` (see :class:`~ledgerflow.storage.migrations.OnOpen`) says whether opening
    may create and migrate the journal; otherwise an existing journal is opened as it is: no
    file is created, nothing is configured or migrated, and (``REQUIRE``) a journal that is
    not at this Ledgerflow's schema version is refused with a hint to run ``ledgerflow
    migrate``.
    """

    embedded = True

    def __init__(
        self, path: str, *, synchronous: str = "full", on_open: OnOpen = OnOpen.MIGRATE
    ) -> None:
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
        # How deep the thread holding the lock is in transactions: the outermost began one,
        # the calls inside join it (a write in a savepoint of its own).
        self._depth = 0
        self._writing = False
        self._conn = self._connect(on_open)

    def _connect(self, on_open: OnOpen) -> sqlite3.Connection:
        if not self._exists():
            if on_open is not OnOpen.MIGRATE:
                raise StoreNotFoundError(
                    f"no journal at {self.path}: the file does not exist, and the store was "
                    "opened without creating one (check the path; `ledgerflow migrate --db URL` "
                    "creates it)",
                    path=self.path,
                )
            self._create()
        conn = self._open_file()
        try:
            conn.execute(f"PRAGMA busy_timeout = {limits.SQLITE_BUSY_TIMEOUT_MS}")
            ours = self._identify(conn)
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys = ON")
            if on_open is OnOpen.MIGRATE:
                if not ours:
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute("PRAGMA journal_mode = WAL")
                self._migrate(conn)
            elif on_open is OnOpen.REQUIRE:
                migrations.require_current(self._applied(conn), "sqlite", where=self.path)
        except sqlite3.Error as exc:
            conn.close()
            raise _map_error(exc, self.path) from None
        except StorageError:
            conn.close()
            raise
        return conn

    def _exists(self) -> bool:
        """Whether the journal file is there; a file that is there but empty is refused."""
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise StorageUnavailableError(f"folder {folder} does not exist", path=self.path)
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot read {self.path}: {exc}", path=self.path
            ) from None
        if size == 0:
            # Journals are created whole (see _create), so an empty file was never one: it is
            # a truncated journal or somebody else's placeholder. Setting it up as a new ledger
            # would quietly restart every business key.
            raise StorageCorruptError(
                f"{self.path} is an empty file (0 bytes), not a Ledgerflow journal: a "
                "truncated journal is restored from a backup, not started afresh; remove the "
                "file to create a new journal there",
                path=self.path,
            )
        return True

    def _open_file(self) -> sqlite3.Connection:
        # mode=rw: open the file that is there, never create one (a typo must not become a
        # new, empty journal).
        uri = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=rw"
        try:
            conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False, timeout=0
            )
        except sqlite3.Error as exc:
            raise _map_error(exc, self.path) from None
        conn.row_factory = sqlite3.Row
        return conn

    def _create(self) -> None:
        """Create the journal whole: built and migrated under a scratch name, then linked into
        place. Another process that looks meanwhile sees no file or a complete journal, never
        the empty file it would refuse."""
        folder, name = os.path.split(os.path.abspath(self.path))
        try:
            handle, scratch = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".new")
            os.close(handle)
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot create {self.path}: {exc.strerror}", path=self.path
            ) from None
        try:
            conn = sqlite3.connect(scratch, isolation_level=None)
            try:
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                self._migrate(conn)
            finally:
                # The last connection to close checkpoints the WAL into the file.
                conn.close()
            _link_new(scratch, self.path)
        except sqlite3.Error as exc:
            raise _map_error(exc, self.path) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(scratch)

    def _identify(self, conn: sqlite3.Connection) -> bool:
        """Refuse a file that is not ours before writing anything to it; True when it is
        ours, False when it is an empty database Ledgerflow may make its own."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        if app_id == APPLICATION_ID:
            return True
        if app_id == 0 and not tables:
            return False
        raise ForeignDatabaseError(
            f"{self.path} is a database that Ledgerflow did not create "
            f"(application_id={app_id}, tables: {', '.join(tables[:5]) or 'none'}); "
            "it was left untouched",
            path=self.path,
        )

    @staticmethod
    def _applied(conn: sqlite3.Connection) -> dict[int, str]:
        """The migrations the journal records as applied: number -> checksum."""
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lf_schema_migrations'"
        ).fetchone()
        if found is None:
            return {}
        return {
            int(r["version"]): r["checksum"]
            for r in conn.execute("SELECT version, checksum FROM lf_schema_migrations")
        }

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS lf_schema_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL, "
                "applied_at REAL NOT NULL)"
            )
            for migration in migrations.pending(self._applied(conn), "sqlite", where=self.path):
                for statement in _statements(migration.text):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO lf_schema_migrations VALUES (?, ?, ?, ?)",
                    (migration.number, migration.name, migration.checksum, time.time()),
                )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def migration_status(self) -> MigrationStatus:
        """Where this journal stands against this Ledgerflow's migrations."""
        with self._read():
            applied = self._applied(self._conn)
        return migrations.status_of(applied, "sqlite", where=self.path)

    def schema_version(self) -> int:
        with self._read():
            row = self._execute("SELECT max(version) FROM lf_schema_migrations").fetchone()
        return int(row[0] or 0)

    def _execute(self, sql: str) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql)
        except sqlite3.Error as exc:
            raise _map_error(exc, self.path) from None

    # -- dialect hooks -----------------------------------------------------------------------

    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        try:
            cursor = self._conn.execute(self._q[name], params)
            rows: list[Row] = cursor.fetchall()
        except sqlite3.Error as exc:
            raise _map_error(exc, self.path) from None
        return rows, cursor.rowcount

    @contextlib.contextmanager
    def _dialect_write(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                # Inside an open transaction (store.transaction()): this call's statements
                # stand or fall together, and commit only with the transaction around them.
                if not self._writing:
                    raise StorageError("a write was asked for inside a read", path=self.path)
                with self._joined(), self._savepoint(f"lf_call_{self._depth}"):
                    yield
                return
            self._execute("BEGIN IMMEDIATE")
            self._depth, self._writing = 1, True
            try:
                try:
                    yield
                except BaseException:
                    _rollback(self._conn)
                    raise
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    _rollback(self._conn)
                    raise _map_error(exc, self.path) from None
            finally:
                self._depth, self._writing = 0, False

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                with self._joined():  # a read inside a transaction reads what it wrote
                    yield
                return
            self._execute("BEGIN DEFERRED")
            self._depth = 1
            try:
                try:
                    yield
                except BaseException:
                    _rollback(self._conn)
                    raise
                self._execute("COMMIT")
            finally:
                self._depth = 0

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

    @contextlib.contextmanager
    def _joined(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def wake_source(self) -> WakeSource | None:
        """A new worker's watch of this file's commits (by any process) while it is idle."""
        if self.path == ":memory:" or not push_wakeups_enabled():
            return None  # (in memory: no other connection can commit to it)
        return SqliteWatch(self._data_version, interval_seconds=limits.WAKEUP_WATCH_SECONDS)

    def _data_version(self) -> int | None:
        """``PRAGMA data_version`` of the store's connection (it moves only with other
        connections' commits), or None while a call holds the store: never waits for one."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._depth:
                return None
            version: int = self._conn.execute("PRAGMA data_version").fetchone()[0]
            return version
        except sqlite3.Error:
            return None
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction without hiding why it failed: after some errors (a damaged
    page, a full disk) SQLite has already rolled back, and ROLLBACK itself then fails."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def _link_new(scratch: str, path: str) -> None:
    """Put the finished journal at ``path`` unless another process put one there first."""
    try:
        os.link(scratch, path)
    except FileExistsError:
        return  # another process created it first: its journal is as good as this one
    except OSError as exc:
        raise StorageUnavailableError(f"cannot create {path}: {exc.strerror}", path=path) from None
    folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(folder)  # the new name survives power loss, as the journal's contents do
    finally:
        os.close(folder)


def _statements(script: str) -> list[str]:
    """Split a migration into statements (migrations hold no semicolons inside literals)."""
    body = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]
