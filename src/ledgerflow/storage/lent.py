"""The connections a caller may lend the store, each as one driver-neutral shape (internal).

A service that keeps its own rows in the journal's database lends the engine its connection
(:meth:`~ledgerflow.runtime.engine.Engine.within`), so that its row and the engine's writes
commit together or not at all. Whatever the driver -- ``sqlite3``, psycopg's sync or async
connection, a SQLAlchemy ``Connection`` or ``Session`` over either -- the store's kernel sees
a :class:`Lent`: run one statement and read its rows; say whether a transaction is open to
join; and turn the driver's errors into Ledgerflow's, where a conflict the caller's snapshot
cannot read past (a serialization failure, a deadlock, a stale SQLite snapshot) is a
:class:`~ledgerflow.errors.RetryTransactionError`, never a wrong answer.

Nothing here commits, rolls back or retries: the transaction is the caller's. The one
statement of its own a lent connection may send is SQLite's ``BEGIN`` on a connection in the
``sqlite3`` module's default mode, exactly what the module itself sends before the caller's
next write; psycopg outside autocommit opens its transaction at the first statement by itself.

psycopg and SQLAlchemy are never imported here: a connection of theirs exists only if the
caller imported them, and is recognised by its module.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ledgerflow.errors import (
    ConfigurationError,
    LedgerflowError,
    NoTransactionError,
    RetryTransactionError,
)
from ledgerflow.storage.rows import Row


class Lent(Protocol):
    """A caller's connection as the store's kernel uses it."""

    # "sqlite" or "postgres": whose named queries run on it.
    dialect: str
    # The driver's own connection.
    conn: Any
    # True for an async driver: its statements are awaited on the caller's event loop, so the
    # kernel runs on a thread of its own and hands each statement to the loop.
    asynchronous: bool
    # True when the connection may be used from another thread than the caller's: an asyncio
    # caller's kernel then runs on a thread too, so that a wait on another caller's key never
    # holds up the event loop that caller needs to commit.
    movable: bool

    def execute(self, sql: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        """Run one statement; its rows (mappings by column name) and changed-row count."""

    def join(self) -> None:
        """Make sure a transaction is open to join, or raise NoTransactionError."""

    def in_transaction(self) -> bool:
        """Whether the connection is inside a transaction now."""

    def error(self, exc: Exception) -> LedgerflowError | None:
        """The driver's error as Ledgerflow's (None: not the driver's)."""


def lend(connection: object, *, path: str) -> Lent:
    """The :class:`Lent` shape of a caller's connection; ``path`` names the journal in errors."""
    if isinstance(connection, sqlite3.Connection):
        return _Sqlite3(connection, path)
    module = type(connection).__module__
    if module.startswith("psycopg") and "psycopg" in sys.modules:
        import psycopg

        if isinstance(connection, psycopg.AsyncConnection):
            return _AsyncPsycopg(connection, asyncio.get_running_loop())
        if isinstance(connection, psycopg.Connection):
            return _Psycopg(connection)
    if module.startswith("sqlalchemy"):
        return lend(_driver_connection(connection), path=path)
    raise ConfigurationError(
        f"cannot write through a {type(connection).__qualname__} ({module}): lend a sqlite3 "
        "connection, a psycopg connection (sync or async), or a SQLAlchemy Connection or "
        "Session over one"
    )


@contextlib.contextmanager
def own_sqlite_caller(
    path: str, *, wait_seconds: float
) -> Iterator[tuple[Lent, Callable[[], None]]]:
    """A caller's own new ``sqlite3`` connection to the journal at ``path``, lent, with its
    COMMIT; closed on leaving, so that what was not committed is gone as if the caller died
    (the fault explorer's callers, ``ledgerflow.testing.rolled_back``)."""
    conn = sqlite3.connect(path, timeout=wait_seconds)
    try:
        yield _Sqlite3(conn, path), conn.commit
    finally:
        conn.close()


def _driver_connection(connection: Any) -> object:
    """The DBAPI connection under a SQLAlchemy Session or Connection (a Session joins the
    transaction it holds, beginning one as SQLAlchemy does at its first statement)."""
    if callable(getattr(connection, "get_bind", None)) and callable(
        getattr(connection, "connection", None)
    ):
        connection = connection.connection()  # a Session: its Connection, in its transaction
    pooled = getattr(connection, "connection", None)
    driver = getattr(pooled, "driver_connection", None)
    if driver is None:
        raise ConfigurationError(
            f"cannot find the driver connection under {type(connection).__qualname__}: lend "
            "a SQLAlchemy Connection or Session (an async one is not supported)"
        )
    return cast("object", driver)


# -- sqlite3 ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sqlite3:
    conn: sqlite3.Connection
    path: str
    dialect: str = "sqlite"
    # sqlite3 refuses use from another thread unless opened with check_same_thread=False.
    asynchronous: bool = False
    movable: bool = False

    def execute(self, sql: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        cursor = self.conn.cursor()
        cursor.row_factory = sqlite3.Row  # the caller's own row factory is left as it is
        try:
            cursor.execute(sql, params)
            rows: list[Row] = cursor.fetchall()
            return rows, cursor.rowcount
        finally:
            cursor.close()

    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def join(self) -> None:
        if self.conn.in_transaction:
            return
        # Python 3.12's autocommit attribute (True: every statement commits by itself;
        # False: a transaction is always open); in 3.11 isolation_level None means autocommit.
        autocommit = getattr(self.conn, "autocommit", None)
        if autocommit is True or (autocommit is not False and self.conn.isolation_level is None):
            raise NoTransactionError(
                f"the sqlite3 connection to {self.path} is in autocommit mode with no "
                "transaction open: BEGIN one first, and commit it yourself"
            )
        # The sqlite3 module's default mode: what it would send before the caller's next write.
        self.conn.execute(f"BEGIN {self.conn.isolation_level or ''}".strip())

    def error(self, exc: Exception) -> LedgerflowError | None:
        if not isinstance(exc, sqlite3.Error):
            return None
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_BUSY_SNAPSHOT" or (
            isinstance(exc, sqlite3.OperationalError)
            and "locked" in str(exc)
            and self.conn.in_transaction
        ):
            # A deferred transaction whose snapshot a later commit made stale cannot take the
            # write lock however long it waits: only the whole transaction again can.
            return RetryTransactionError(
                f"your SQLite transaction on {self.path} cannot write: another connection "
                f"committed since it began reading, or holds the write lock ({exc}); roll it "
                "back and run it again (BEGIN IMMEDIATE takes the lock up front)"
            )
        from ledgerflow.storage.sqlite import _map_error

        return _map_error(exc, self.path)


# -- psycopg ---------------------------------------------------------------------------------


def _psycopg_error(exc: Exception) -> LedgerflowError | None:
    import psycopg

    if not isinstance(exc, psycopg.Error):
        return None
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return RetryTransactionError(
            f"your PostgreSQL transaction lost a conflict it cannot read past "
            f"({exc.sqlstate}: {str(exc).strip()}); roll it back and run it again"
        )
    from ledgerflow.storage.postgres import _map_error

    return _map_error(exc)


def _joinable(status: object, autocommit: bool) -> None:
    import psycopg

    states = psycopg.pq.TransactionStatus
    if status == states.INERROR:
        raise NoTransactionError(
            "the psycopg connection's transaction has failed: roll it back (nothing of the "
            "engine's was written)"
        )
    if status == states.IDLE and autocommit:
        raise NoTransactionError(
            "the psycopg connection is in autocommit mode with no transaction open: open one "
            "(with conn.transaction(): ...), and the engine's writes commit with it"
        )


@dataclass(slots=True)
class _Psycopg:
    conn: Any  # psycopg.Connection[Any]; typed loosely so that psycopg stays optional
    dialect: str = "postgres"
    asynchronous: bool = False
    movable: bool = True  # psycopg's connections are thread-safe

    def execute(self, sql: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        from psycopg.rows import dict_row

        with self.conn.cursor(row_factory=dict_row) as cursor:
            # Never prepared: nothing of the engine's stays on the caller's connection.
            cursor.execute(sql, dict(params), prepare=False)
            rows: list[Row] = cursor.fetchall() if cursor.description else []
            return rows, cursor.rowcount

    def in_transaction(self) -> bool:
        import psycopg

        return bool(self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)

    def join(self) -> None:
        _joinable(self.conn.info.transaction_status, bool(self.conn.autocommit))

    def error(self, exc: Exception) -> LedgerflowError | None:
        return _psycopg_error(exc)


@dataclass(slots=True)
class _AsyncPsycopg:
    """psycopg's async connection: the kernel runs on a thread of its own (it is synchronous)
    and hands each statement to the caller's loop, which awaits the kernel meanwhile."""

    conn: Any  # psycopg.AsyncConnection[Any]
    loop: asyncio.AbstractEventLoop
    dialect: str = "postgres"
    asynchronous: bool = True
    movable: bool = True

    def execute(self, sql: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        from psycopg.rows import dict_row

        async def run() -> tuple[list[Row], int]:
            async with self.conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(sql, dict(params), prepare=False)
                rows: list[Row] = await cursor.fetchall() if cursor.description else []
                return rows, cursor.rowcount

        # The caller's loop is free: it awaits the kernel's thread, which waits here.
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def in_transaction(self) -> bool:
        import psycopg

        return bool(self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)

    def join(self) -> None:
        _joinable(self.conn.info.transaction_status, bool(self.conn.autocommit))

    def error(self, exc: Exception) -> LedgerflowError | None:
        return _psycopg_error(exc)
