"""The store's kernel on a connection its caller lends, inside the caller's transaction (internal).

:class:`WithinStore` is the whole SQL store -- every part, every named query, the same checked
writes -- with one difference: its statements run on the caller's connection
(:mod:`ledgerflow.storage.lent`), and what is a write transaction elsewhere is a SAVEPOINT of
the caller's transaction here. Each call is all or nothing (a refused write rolls back to its
savepoint and leaves the caller's transaction usable); nothing commits, rolls back the caller's
work or retries: the caller's COMMIT makes the engine's writes durable with the caller's own
rows, its ROLLBACK leaves no trace of either.

On PostgreSQL the journal's schema is put on the transaction's ``search_path`` for each call
only (``set_config(..., true)``) and the caller's own path put back after it. :func:`borrow`
refuses a connection that is not to the store's own journal (the same database and cluster,
the same journal marker; on SQLite the journal file itself as the main database, nothing
attached) before anything is written through it.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from ledgerflow.errors import ForeignConnectionError, LedgerflowError, StorageError
from ledgerflow.storage import queries
from ledgerflow.storage.lent import Lent
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_store import SqlStore


class WithinStore(SqlStore):
    """The SQL store on a lent connection; every write a savepoint of the caller's transaction."""

    def __init__(self, lent: Lent, *, url: str, schema: str | None) -> None:
        super().__init__(queries.load(lent.dialect))
        self.lent = lent
        self.url = url
        self.embedded = lent.dialect == "sqlite"
        self._schema = schema
        self._depth = 0

    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        try:
            return self.lent.execute(self._q[name], params)
        except Exception as exc:
            mapped = self.lent.error(exc)
            if mapped is None:
                raise
            raise mapped from None

    @contextlib.contextmanager
    def _dialect_write(self) -> Iterator[None]:
        if self._depth == 0:
            self.lent.join()
        self._run("within_savepoint", {})
        self._depth += 1
        try:
            caller_path = self._enter_schema() if self._depth == 1 else None
            yield
            if caller_path is not None:
                self._run("set_search_path", {"search_path": caller_path})
        except BaseException:
            self._depth -= 1
            # Back to before this call (its search_path too); the caller's transaction goes on.
            with contextlib.suppress(LedgerflowError):
                self._run("within_rollback", {})
                self._run("within_release", {})
            raise
        self._depth -= 1
        self._run("within_release", {})

    def _enter_schema(self) -> str | None:
        """Put the journal's schema on the transaction's path; the caller's path, to restore."""
        if self._schema is None:
            return None
        rows, _ = self._run("select_search_path", {})
        self._run("set_search_path", {"search_path": self._schema})
        return str(rows[0]["search_path"])

    def _read(self) -> contextlib.AbstractContextManager[None]:
        # A read inside the caller's transaction sees its uncommitted writes; in a savepoint
        # too, so that the schema is set for it and a failed read leaves nothing behind.
        return self._dialect_write()

    def _savepoint(self, name: str) -> contextlib.AbstractContextManager[None]:
        return self._dialect_write()

    def close(self) -> None:
        """Nothing to close: the connection is the caller's."""


# The journal's marker, and where the connection's database lives (see _identity).
Identity = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]
# The PostgreSQL connections proven to be to a journal, with that journal's identity: forgotten
# with the connection.
_PROVEN: weakref.WeakKeyDictionary[Any, Identity] = weakref.WeakKeyDictionary()


def journal_identity(store: SqlStore) -> Identity:
    """The store's own marker and database, read through its own connection."""
    return _identity(store)


def borrow(store: SqlStore, lent: Lent, *, ours: Identity) -> WithinStore:
    """The store's kernel on the lent connection, once it is proven to be to the store's own
    journal (``ours``: :func:`journal_identity`);
    :class:`~ledgerflow.errors.ForeignConnectionError` otherwise, with nothing written."""
    path = str(getattr(store, "path", store.url))
    expected = "sqlite" if store.embedded else "postgres"
    if lent.dialect != expected:
        raise ForeignConnectionError(
            f"a {lent.dialect} connection cannot write to the journal at {store.url} "
            f"({expected}): lend a connection to that database"
        )
    within = WithinStore(lent, url=store.url, schema=getattr(store, "schema", None))
    if not store.embedded and _PROVEN.get(lent.conn) == ours:
        return within  # a PostgreSQL connection's database never changes: proven once
    try:
        theirs = _identity(within)
    except StorageError as exc:  # no such table, no such schema: not a journal at all
        raise ForeignConnectionError(
            f"the connection lent is not to the journal at {store.url}: its marker cannot be "
            f"read through it ({exc.message})"
        ) from None
    if store.embedded:
        _same_file(path, theirs[1])
    elif theirs[1] != ours[1]:
        raise ForeignConnectionError(
            f"the connection lent is to database {theirs[1][0][0]!r} of another server or "
            f"another database than the journal at {store.url}; nothing was written through it"
        )
    if theirs[0] != ours[0]:
        raise ForeignConnectionError(
            f"the connection lent is to another Ledgerflow journal than {store.url} (its "
            "marker differs); nothing was written through it"
        )
    if not store.embedded:
        # (A SQLite connection is checked each time: a file may be ATTACHed to it since.)
        _PROVEN[lent.conn] = ours
    return within


def audit_visible(store: SqlStore, audit_id: int, fingerprint: str) -> bool:
    """Whether this audit record is visible through the store's own connection: for one
    written inside a caller's transaction, whether that transaction committed."""
    with store._read():
        rows, _ = store._run("audit_visible", {"audit_id": audit_id, "fingerprint": fingerprint})
    return bool(rows)


def _identity(store: SqlStore) -> Identity:
    """The journal's marker, and where the connection's database lives (read in one read)."""
    with store._read():
        marker, _ = store._run("select_journal_marker", {})
        where, _ = store._run("select_database_identity", {})
    return (
        [(r["applied_at"], r["checksum"]) for r in marker],
        [(r["name"], r["file"]) for r in where],
    )


def _same_file(path: str, files: list[tuple[Any, ...]]) -> None:
    """SQLite: the connection's main database is the journal file, and nothing is attached."""
    main = next((file for name, file in files if name == "main"), "")
    try:
        same = bool(main) and os.path.samefile(main, path)
    except OSError:
        same = False
    if not same:
        raise ForeignConnectionError(
            f"the sqlite3 connection lent has {main or 'an in-memory database'} as its main "
            f"database, not the journal {path}: open the connection on the journal file "
            "(an ATTACHed journal is refused: a commit across attached WAL files is atomic "
            "per file only)",
            path=path,
        )
    attached = [
        f"{name} ({file or 'in memory'})" for name, file in files if name not in ("main", "temp")
    ]
    if attached:
        raise ForeignConnectionError(
            f"the sqlite3 connection lent to the journal {path} has {', '.join(attached)} "
            "attached: a commit across attached WAL files is atomic per file only, so your "
            "rows there and the journal's could part; keep your rows in the journal file",
            path=path,
        )
