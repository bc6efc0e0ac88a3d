"""The PostgreSQL dialect: a shared journal for many workers on many machines (internal).

One schema (``ledgerflow`` unless the URL says ``?schema=``) holds the ledgers, migrated on
open under an advisory lock so that workers starting together migrate once. Connections come
from a small psycopg pool, checked before use, so a worker reconnects by itself after the
server restarts. Leases are measured by the database's clock (:attr:`database_clock`); every
commit is a transaction whose first statement locks and fences the instance row, so a stale
owner's writes find zero rows and are refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import psycopg
import psycopg_pool
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ledgerflow.errors import (
    ConcurrencyError,
    ConfigurationError,
    ForeignDatabaseError,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from ledgerflow.storage import queries
from ledgerflow.storage.rows import Row
from ledgerflow.storage.sql_store import SqlStore

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Held while migrating: one migrator per database at a time.
_MIGRATION_LOCK = 0x4C464C57
POOL_SIZE_MAX = 4
CONNECT_TIMEOUT_SECONDS = 10.0


def _map_error(exc: psycopg.Error) -> StorageError | ConcurrencyError:
    if isinstance(exc, psycopg.errors.IntegrityError):
        return ConcurrencyError(f"conflicting write refused by the store: {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg.errors.SerializationFailure):
        return StorageUnavailableError(f"PostgreSQL store unavailable: {exc}")
    return StorageError(f"PostgreSQL error: {exc}")


class PostgresStore(SqlStore):
    """A Ledgerflow journal in one PostgreSQL schema."""

    database_clock = True

    def __init__(self, url: str, *, schema: str = "ledgerflow") -> None:
        super().__init__(queries.load("postgres"))
        if not _SCHEMA.match(schema):
            raise ConfigurationError(f"schema {schema!r} must be a lower-case SQL identifier")
        self.url = url
        self.schema = schema
        self._local = threading.local()
        conninfo = url.split("?", 1)[0].replace("postgresql+psycopg://", "postgresql://")
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=POOL_SIZE_MAX,
            kwargs={"row_factory": dict_row, "options": f"-c search_path={schema}"},
            check=ConnectionPool.check_connection,
            open=False,
            name=f"ledgerflow-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageUnavailableError(f"cannot reach PostgreSQL at {conninfo}: {exc}") from None
        self._migrate()

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
                try:
                    yield conn
                finally:
                    self._local.conn = None
        except psycopg_pool.PoolTimeout as exc:
            raise StorageUnavailableError(f"no PostgreSQL connection: {exc}") from None
        except psycopg.Error as exc:
            raise _map_error(exc) from None

    @contextlib.contextmanager
    def _write_transaction(self) -> Iterator[None]:
        with self._connection() as conn:
            try:
                with conn.transaction():
                    yield
            except psycopg.Error as exc:
                raise _map_error(exc) from None

    _read = _write_transaction

    @contextlib.contextmanager
    def _savepoint(self, name: str) -> Iterator[None]:
        conn: psycopg.Connection[Row] = self._local.conn
        with conn.transaction():
            yield

    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        conn: psycopg.Connection[Row] = self._local.conn
        pipeline: psycopg.Pipeline | None = getattr(self._local, "pipeline", None)
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

    def _migrate(self) -> None:
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            tables = {
                r["table_name"]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (self.schema,),
                )
            }
            if tables and "lf_schema_migrations" not in tables:
                raise ForeignDatabaseError(
                    f"schema {self.schema} holds tables Ledgerflow did not create "
                    f"({', '.join(sorted(tables)[:5])}); it was left untouched"
                )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS lf_schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
            applied = {
                int(r["version"]): r["checksum"]
                for r in conn.execute("SELECT version, checksum FROM lf_schema_migrations")
            }
            known = queries.migrations("postgres")
            newest = max((n for n, _, _ in known), default=0)
            if applied and max(applied) > newest:
                raise SchemaVersionError(
                    f"schema {self.schema} has version {max(applied)}, newer than this "
                    f"Ledgerflow knows ({newest}); upgrade Ledgerflow"
                )
            for number, name, text in known:
                checksum = hashlib.sha256(text.encode()).hexdigest()
                if number in applied:
                    if applied[number] != checksum:
                        raise SchemaVersionError(
                            f"migration {number:04d}_{name} was changed after it was applied"
                        )
                    continue
                conn.execute(text)
                conn.execute(
                    "INSERT INTO lf_schema_migrations VALUES (%s, %s, %s, %s)",
                    (number, name, checksum, time.time()),
                )

    def schema_version(self) -> int:
        with self._read():
            rows = self._local.conn.execute("SELECT max(version) AS v FROM lf_schema_migrations")
            return int(rows.fetchone()["v"] or 0)

    def close(self) -> None:
        self._pool.close()
