"""The PostgreSQL dialect: a shared journal for many workers on many machines (internal).

One schema (``ledgerflow`` unless the URL says ``?schema=``) holds the ledgers, migrated on
open (unless migration is off, see :mod:`ledgerflow.storage.url`) under an advisory lock so
that workers starting together migrate once. Opening first makes one direct connection, so a
missing database, refused credentials or an unreachable server is one clear error named by its
cause, at once; only then is the pool opened. Connections come from a small psycopg pool,
checked before use, so a worker reconnects by itself after the server restarts. Leases are
measured by the database's clock (:attr:`database_clock`); every commit is a transaction whose
first statement locks and fences the instance row, so a stale owner's writes find zero rows
and are refused. A transaction that made work due rings the process's wake-up doorbell once it
has committed (see :mod:`ledgerflow.storage.wake_sources`), never from inside.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import psycopg
import psycopg_pool
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ledgerflow import limits
from ledgerflow.errors import (
    ConcurrencyError,
    ForeignDatabaseError,
    StorageAccessError,
    StorageError,
    StorageUnavailableError,
    StoreNotFoundError,
)
from ledgerflow.log_muting import muted
from ledgerflow.redaction import redact
from ledgerflow.storage import migrations, postgres_url, queries
from ledgerflow.storage.migrations import MigrationStatus, OnOpen
from ledgerflow.storage.postgres_url import PostgresTarget
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.storage.wake_sources import (
    DUE_STATEMENTS,
    PgListener,
    PgNotifier,
    WakeSource,
    channel_of,
    push_wakeups_enabled,
)

# Held while migrating: one migrator per database at a time.
_MIGRATION_LOCK = 0x4C464C57
POOL_SIZE_MAX = 4
CONNECT_TIMEOUT_SECONDS = 10.0
# Where workers LISTEN when not at the store's own URL: e.g. the server itself, past a pooler
# in transaction mode (PgBouncer), which drops LISTEN. A PostgreSQL URL.
LISTEN_URL_VARIABLE = "LEDGERFLOW_LISTEN_URL"
# libpq's words for why a connection was refused, and what each means for the operator.
_MISSING_DATABASE = re.compile(r'database "[^"]*" does not exist')
_REFUSED_CREDENTIALS = re.compile(
    r"password authentication failed|role \"[^\"]*\" does not exist|no pg_hba\.conf entry|"
    r"authentication failed|no password supplied|password is required|permission denied",
    re.IGNORECASE,
)


def _map_error(exc: psycopg.Error) -> StorageError | ConcurrencyError:
    if isinstance(exc, psycopg.errors.IntegrityError):
        return ConcurrencyError(f"conflicting write refused by the store: {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg.errors.SerializationFailure):
        return StorageUnavailableError(f"PostgreSQL store unavailable: {redact(str(exc))}")
    return StorageError(f"PostgreSQL error: {redact(str(exc))}")


def _cause(text: str) -> str:
    """libpq's own reason, without its "connection to server ... failed:" preamble."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    reason = lines[0] if lines else text
    reason = reason.split(" failed: ", 1)[-1]
    return reason.removeprefix("FATAL:").strip()


def _connect_failure(exc: psycopg.Error, target: PostgresTarget) -> StorageError:
    """The first connection's failure, named by its cause (libpq gives no SQLSTATE for it)."""
    text = redact(str(exc))
    where = f"PostgreSQL at {target.host}"
    if _MISSING_DATABASE.search(text):
        return StoreNotFoundError(
            f"{where} has no database {target.dbname!r}: create it (CREATE DATABASE) or fix "
            f"the database name in {target.display}"
        )
    if _REFUSED_CREDENTIALS.search(text):
        return StorageAccessError(
            f"{where} refused the credentials of {target.display}: {_cause(text)}"
        )
    return StorageUnavailableError(
        f"cannot reach {where} ({target.display}): {_cause(text)}; is the server running "
        "and reachable from here?"
    )


class PostgresStore(SqlStore):
    """A Ledgerflow journal in one PostgreSQL schema."""

    database_clock = True

    def __init__(self, target: PostgresTarget, *, on_open: OnOpen = OnOpen.MIGRATE) -> None:
        super().__init__(queries.load("postgres"))
        # Only the redacted URL is kept where anything could print it.
        self.url = target.display
        self.schema = target.schema
        self._local = threading.local()
        self._conninfo = target.conninfo
        self._channel = channel_of(target.schema)
        # This process's wake-up doorbell for the schema (its thread starts at the first ring).
        self.notifier = (
            PgNotifier(target.conninfo, self._channel, window_seconds=limits.WAKEUP_WINDOW_SECONDS)
            if push_wakeups_enabled()
            else None
        )
        # One direct connection first: a missing database, refused credentials or a server
        # that does not answer is reported at once, by its cause, instead of after the pool's
        # silent retries.
        try:
            psycopg.connect(target.conninfo).close()
        except psycopg.Error as exc:
            raise _connect_failure(exc, target) from None
        self._pool = ConnectionPool(
            target.conninfo,
            min_size=1,
            max_size=POOL_SIZE_MAX,
            kwargs={"row_factory": dict_row},
            check=ConnectionPool.check_connection,
            open=False,
            name=f"ledgerflow-{target.schema}",
        )
        try:
            # The pool's warnings while it opens would only repeat, several times over, a
            # failure the direct connection above has already reported with its cause.
            with muted("psycopg.pool"):
                self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageUnavailableError(
                f"cannot reach PostgreSQL at {target.host} ({target.display}): {exc}"
            ) from None
        try:
            if on_open is OnOpen.MIGRATE:
                self._migrate()
            elif on_open is OnOpen.REQUIRE:
                migrations.require_current(self._applied(), "postgres", where=self._where)
        except BaseException:
            self._pool.close()
            raise

    # -- connections and transactions --------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Row]]:
        held: psycopg.Connection[Row] | None = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        try:
            with self._pool.connection(timeout=CONNECT_TIMEOUT_SECONDS) as raw:
                # The pool's connections are made with dict_row (see kwargs above).
                conn = cast("psycopg.Connection[Row]", raw)
                self._local.conn = conn
                self._local.due = False
                try:
                    yield conn
                finally:
                    self._local.conn = None
        except psycopg_pool.PoolTimeout as exc:
            raise StorageUnavailableError(f"no PostgreSQL connection: {exc}") from None
        except psycopg.Error as exc:
            raise _map_error(exc) from None
        # Only now, its transaction committed (a rolled-back one raised above): idle workers
        # elsewhere may look at once. Never a NOTIFY inside the engine's transaction.
        if self._local.due:
            self._local.due = False
            if self.notifier is not None:
                self.notifier.ring()

    @contextlib.contextmanager
    def _dialect_write(self) -> Iterator[None]:
        # Inside an open transaction (store.transaction()) the thread's connection is held
        # and psycopg makes this a savepoint: the call's statements stand or fall together,
        # and commit only with the transaction around them.
        with self._connection() as conn:
            try:
                with conn.transaction():
                    yield
            except psycopg.Error as exc:
                raise _map_error(exc) from None

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        held: psycopg.Connection[Row] | None = getattr(self._local, "conn", None)
        if held is not None and held.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            yield  # a read inside a transaction reads what it wrote, without a savepoint
            return
        with self._dialect_write():
            yield

    @contextlib.contextmanager
    def _savepoint(self, name: str) -> Iterator[None]:
        conn: psycopg.Connection[Row] = self._local.conn
        with conn.transaction():
            yield

    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        conn: psycopg.Connection[Row] = self._local.conn
        pipeline: psycopg.Pipeline | None = getattr(self._local, "pipeline", None)
        if name in DUE_STATEMENTS:
            self._local.due = True
        try:
            cursor = conn.execute(self._q[name], dict(params), prepare=True)
            if pipeline is not None:
                pipeline.sync()  # this answer is needed now: wait for it and all before it
            rows: list[Row] = cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            raise _map_error(exc) from None
        return rows, cursor.rowcount

    pipelines = True

    def _send(
        self,
        name: str,
        params: Mapping[str, Any],
        check: Callable[[list[Row], int], None] | None = None,
    ) -> None:
        pending: list[tuple[psycopg.Cursor[Row], Callable[[list[Row], int], None]]] | None
        pending = getattr(self._local, "pending", None)
        if pending is None:
            super()._send(name, params, check)
            return
        conn: psycopg.Connection[Row] = self._local.conn
        if name in DUE_STATEMENTS:
            self._local.due = True
        try:
            cursor = conn.execute(self._q[name], dict(params), prepare=True)
        except psycopg.Error as exc:
            raise _map_error(exc) from None
        if check is not None:
            pending.append((cursor, check))

    @contextlib.contextmanager
    def _pipeline(self) -> Iterator[None]:
        # One round trip for a whole group's statements instead of one each: the server runs
        # them in order as they arrive; every answer is read, and every check made, before the
        # enclosing transaction may commit.
        conn: psycopg.Connection[Row] = self._local.conn
        pending: list[tuple[psycopg.Cursor[Row], Callable[[list[Row], int], None]]] = []
        try:
            with conn.pipeline() as pipeline:
                self._local.pipeline, self._local.pending = pipeline, pending
                try:
                    yield
                    pipeline.sync()
                finally:
                    self._local.pipeline = self._local.pending = None
            for cursor, check in pending:
                check(cursor.fetchall() if cursor.description else [], cursor.rowcount)
        except psycopg.Error as exc:
            raise _map_error(exc) from None

    # -- schema ------------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        return f"schema {self.schema} of {self.url}"

    def _migrate(self) -> None:
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            tables = self._tables(conn)
            if tables and "lf_schema_migrations" not in tables:
                raise ForeignDatabaseError(
                    f"schema {self.schema} holds tables Ledgerflow did not create "
                    f"({', '.join(sorted(tables)[:5])}); it was left untouched"
                )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS lf_schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
            applied = self._applied_in(conn)
            for migration in migrations.pending(applied, "postgres", where=self._where):
                conn.execute(migration.text)
                conn.execute(
                    "INSERT INTO lf_schema_migrations VALUES (%s, %s, %s, %s)",
                    (migration.number, migration.name, migration.checksum, time.time()),
                )

    def _tables(self, conn: psycopg.Connection[Row]) -> set[str]:
        return {
            r["table_name"]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (self.schema,),
            )
        }

    def _applied_in(self, conn: psycopg.Connection[Row]) -> dict[int, str]:
        """The migrations the schema records as applied (number -> checksum); reads only."""
        tables = self._tables(conn)
        if "lf_schema_migrations" not in tables:
            if tables:
                raise ForeignDatabaseError(
                    f"schema {self.schema} holds tables Ledgerflow did not create "
                    f"({', '.join(sorted(tables)[:5])}); it was left untouched"
                )
            return {}
        rows = conn.execute(f"SELECT version, checksum FROM {self.schema}.lf_schema_migrations")
        return {int(r["version"]): r["checksum"] for r in rows}

    def _applied(self) -> dict[int, str]:
        with self._read():
            applied: dict[int, str] = self._applied_in(self._local.conn)
        return applied

    def migration_status(self) -> MigrationStatus:
        """Where this schema stands against this Ledgerflow's migrations."""
        return migrations.status_of(self._applied(), "postgres", where=self._where)

    def schema_version(self) -> int:
        return max(self._applied(), default=0)

    # -- push wake-ups -------------------------------------------------------------------------

    def wake_source(self) -> WakeSource | None:
        """A worker's own listener for the schema's wake-ups (at ``LEDGERFLOW_LISTEN_URL``
        when set, else at the store's URL), probed by a NOTIFY sent as commits send theirs."""
        if not push_wakeups_enabled():
            return None
        listen_url = os.environ.get(LISTEN_URL_VARIABLE)
        conninfo = postgres_url.parse(listen_url, {}).conninfo if listen_url else self._conninfo
        return PgListener(
            conninfo,
            self._channel,
            probe=self._send_probe,
            probe_seconds=limits.WAKEUP_PROBE_SECONDS,
        )

    def _send_probe(self) -> None:
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_notify(%s, '')", (self._channel,))

    def close(self) -> None:
        if self.notifier is not None:
            self.notifier.close()
        self._pool.close()
