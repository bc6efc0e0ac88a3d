"""Start, signal and cancel inside the caller's own transaction (``engine.within``).

A service keeps its own rows in the journal's database and lends the engine its connection:
the caller's row and the engine's writes (with their audit records) commit together or not at
all. Every test uses the caller's own connection -- a ``sqlite3`` connection to a real journal
file, a psycopg connection (sync and async) to a real PostgreSQL database -- and reads the
outcome through another connection (the engine's store), which sees only what is committed.
The caller SIGKILLed with its transaction open is a real process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

import ledgerflow as lf
from conditions import eventually, until
from ledgerflow.errors import (
    ConcurrencyError,
    ForeignConnectionError,
    InstanceNotFoundError,
    NotCommittedError,
    NoTransactionError,
    RetryTransactionError,
)
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime.within import WithinState
from ledgerflow.testing.oracle import changes_audited
from ledgerflow.testing.rolled_back import RolledBackCallers
from postgres_schema import postgres_url
from processes import child_environment

# A PostgreSQL backend waiting for a lock (a caller's start waiting on another's key).
WAITING_ON_A_LOCK = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
BACKENDS = [
    "sqlite",
    pytest.param("postgres-sync", marks=pytest.mark.postgres),
    pytest.param("postgres-async", marks=pytest.mark.postgres),
]


def shop() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
        event = (await ctx.wait_for("go")).payload if request.get("wait") else None
        return {"sku": request["sku"], "event": event}

    return registry


@dataclass
class Caller:
    """A service's own connection to the journal's database and its own table there."""

    kind: str
    url: str  # the engine's store URL
    conn: Any
    table: str

    @property
    def is_async(self) -> bool:
        return self.kind == "postgres-async"

    async def execute(self, sql: str, *params: Any) -> None:
        sql = sql.replace("?", "%s") if self.kind != "sqlite" else sql
        if self.is_async:
            await self.conn.execute(sql, params)
        else:
            self.conn.execute(sql, params)

    async def begin(self, level: str | None = None) -> None:
        if self.kind == "sqlite":
            self.conn.execute(f"BEGIN {level or ''}")
        else:
            await self.execute(f"BEGIN ISOLATION LEVEL {level or 'READ COMMITTED'}")

    async def insert_order(self, order_id: str) -> None:
        await self.execute(f"INSERT INTO {self.table} (id) VALUES (?)", order_id)

    async def commit(self) -> None:
        if self.is_async:
            await self.conn.commit()
        else:
            self.conn.commit()

    async def rollback(self) -> None:
        if self.is_async:
            await self.conn.rollback()
        else:
            self.conn.rollback()


def _committed_orders(caller: Caller) -> list[str]:
    """The caller's rows as another connection sees them (committed ones only)."""
    if caller.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(caller.url.removeprefix("sqlite:///"))) as c:
            return [r[0] for r in c.execute(f"SELECT id FROM {caller.table} ORDER BY id")]
    import psycopg

    with psycopg.connect(caller.url.partition("?")[0]) as c:
        return [r[0] for r in c.execute(f"SELECT id FROM {caller.table} ORDER BY id")]


def _app_table(nodeid: str) -> str:
    return (
        "app_"
        + hashlib.sha256(
            f"{nodeid} {os.environ.get('PYTEST_XDIST_WORKER', '')}".encode()
        ).hexdigest()[:16]
    )


def _journal(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return postgres_url(request.node.nodeid)


@contextlib.asynccontextmanager
async def connected(kind: str, url: str, table: str, **options: Any) -> AsyncIterator[Any]:
    """The caller's own connection (sqlite3 in its default mode; psycopg outside autocommit)."""
    if kind == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), **options)
        try:
            yield conn
        finally:
            conn.close()
        return
    import psycopg

    base = url.partition("?")[0]
    if kind == "postgres-sync":
        with psycopg.connect(base, **options) as conn:
            yield conn
    else:
        async with await psycopg.AsyncConnection.connect(base, **options) as aconn:
            yield aconn


@contextlib.asynccontextmanager
async def setting(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[lf.Engine, Caller]]:
    """An engine on a fresh journal, and a caller with its own table in the same database."""
    url = _journal(kind, request, tmp_path)
    table = _app_table(request.node.nodeid)
    async with lf.Engine(url, shop()) as engine:
        # The journal exists now; the caller's own table beside it (PostgreSQL: in public).
        if kind == "sqlite":
            with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as c:
                c.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY)")
                c.commit()
        else:
            import psycopg

            with psycopg.connect(url.partition("?")[0], autocommit=True) as c:
                c.execute(f"DROP TABLE IF EXISTS {table}")
                c.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY)")
        async with connected(kind, url, table) as conn:
            yield engine, Caller(kind=kind, url=url, conn=conn, table=table)


async def _drain(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)


@pytest.mark.parametrize("kind", BACKENDS)
def test_commit_writes_the_row_the_instance_and_the_audit_together(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: the caller's row and the started instance commit together, with the start's
    audit record under the caller's principal; a worker runs the instance once committed.

    Method: in one caller transaction insert the row and start through ``within``; before the
    commit the store's own connection sees nothing (and ``result`` says NotCommittedError,
    ``open``); after it, all three are there and the workflow's result arrives.
    """

    async def main() -> None:
        async with setting(kind, request, tmp_path) as (engine, caller):
            await caller.begin()
            await caller.insert_order("o-1")
            async with engine.within(caller.conn, actor="service:orders") as tx:
                started = await tx.start("order", key="o-1", input={"sku": "A1"})
                assert started.created
            # Before the commit: invisible through any other connection.
            assert (
                await engine.store_thread.call(engine.store.get_instance, started.instance_id)
                is None
            )
            assert engine.store.audit_records() == []
            assert _committed_orders(caller) == []
            with pytest.raises(NotCommittedError) as refused:
                await engine.result(started.instance_id, timeout=1)
            assert refused.value.state == "open"
            assert refused.value.instance_id == started.instance_id
            with pytest.raises(NotCommittedError):
                await tx.committed()
            assert await tx.state() is WithinState.OPEN

            await caller.commit()
            await tx.committed()
            assert await tx.state() is WithinState.COMMITTED
            assert _committed_orders(caller) == ["o-1"]
            [audit] = engine.store.audit_records()
            assert (audit.kind, audit.actor, audit.outcome) == (
                "start",
                "service:orders",
                "applied",
            )
            assert audit.instance_id == started.instance_id
            await _drain(engine)
            assert await engine.result(started.instance_id, timeout=10) == {
                "sku": "A1",
                "event": None,
            }

    asyncio.run(main())


@pytest.mark.parametrize("kind", BACKENDS)
def test_rollback_leaves_no_instance_no_audit_and_no_work(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: a caller that rolls back leaves nothing: no row, no instance, no audit record,
    nothing for a worker; the engine says the instance was rolled back, a second engine
    (another process's view) that it does not exist.

    Method: start inside the transaction, roll back, then read through both engines and
    drain a worker (it finds nothing); the same key then starts afresh in a new transaction.
    """

    async def main() -> None:
        async with setting(kind, request, tmp_path) as (engine, caller):
            await caller.begin()
            await caller.insert_order("o-2")
            tx = engine.within(caller.conn)
            started = await tx.start("order", key="o-2", input={"sku": "B"})
            await caller.rollback()
            assert await tx.state() is WithinState.ROLLED_BACK
            with pytest.raises(NotCommittedError) as refused:
                await engine.get(started.instance_id)
            assert refused.value.state == "rolled-back"
            async with lf.Engine(caller.url, shop()) as elsewhere:
                with pytest.raises(InstanceNotFoundError) as missing:
                    await elsewhere.get(started.instance_id)
                assert not isinstance(missing.value, NotCommittedError)
            assert engine.store.audit_records() == []
            assert _committed_orders(caller) == []
            await _drain(engine)
            assert await engine.list() == []

            # The key is free: a new transaction starts it, and this time it commits.
            await caller.begin()
            again = engine.within(caller.conn)
            restarted = await again.start("order", key="o-2", input={"sku": "B"})
            assert restarted.created
            assert restarted.instance_id == started.instance_id
            await caller.commit()
            await again.committed()
            await _drain(engine)
            assert (await engine.result(started.instance_id, timeout=10))["sku"] == "B"
            assert changes_audited(engine.store) == []

    asyncio.run(main())


@pytest.mark.parametrize("kind", BACKENDS)
def test_signal_and_cancel_commit_or_vanish_with_the_callers_transaction(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: a signal and a cancel request written inside the caller's transaction are kept
    (with their audit records) only if it commits; a signal may go to an instance the same
    transaction started.

    Method: start and signal in one transaction and commit: the worker takes the event. Then a
    cancel request in a transaction rolled back leaves no request; committed, it stands.
    """

    async def main() -> None:
        async with setting(kind, request, tmp_path) as (engine, caller):
            await caller.begin()
            tx = engine.within(caller.conn, actor="service:orders")
            started = await tx.start("order", key="o-3", input={"sku": "C", "wait": True})
            delivered = await tx.signal(started.instance_id, "go", event_id="e-1", payload=7)
            assert delivered.outcome is lf.DeliveryOutcome.ACCEPTED
            await caller.commit()
            await tx.committed()
            await _drain(engine)
            assert await engine.result(started.instance_id, timeout=10) == {"sku": "C", "event": 7}

            await caller.begin()
            waiting = await engine.within(caller.conn).start(
                "order", key="o-4", input={"sku": "D", "wait": True}
            )
            await caller.commit()
            await _drain(engine)  # it waits for "go" now
            await caller.begin()
            cancelling = engine.within(caller.conn)
            await cancelling.cancel(waiting.instance_id, reason="customer changed their mind")
            await caller.rollback()
            assert (await engine.get(waiting.instance_id)).cancel_requested_at is None
            await caller.begin()
            cancelling = engine.within(caller.conn, actor="service:orders")
            await cancelling.cancel(waiting.instance_id, reason="customer changed their mind")
            await caller.commit()
            await cancelling.committed()
            assert (await engine.get(waiting.instance_id)).cancel_requested_at is not None
            await _drain(engine)
            assert (await engine.get(waiting.instance_id)).status is lf.InstanceStatus.CANCELLED
            kinds = [(a.kind, a.actor) for a in engine.store.audit_records()]
            assert kinds == [
                ("start", "service:orders"),
                ("signal", "service:orders"),
                ("start", "ledgerflow:within"),
                ("cancel", "service:orders"),
            ]
            # Every change from outside has its audit record, committed with it.
            assert changes_audited(engine.store) == []

    asyncio.run(main())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_refused_start_leaves_the_callers_transaction_usable(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: a start the engine refuses (the key is held with another input) rolls back to
    its own savepoint only: the caller's transaction goes on and its row still commits.

    Method: start key o-5 and commit; in a new transaction insert a row, start o-5 with
    another input (ConcurrencyError), insert a second row, commit: both rows are there.
    """

    async def main() -> None:
        async with setting(kind, request, tmp_path) as (engine, caller):
            await caller.begin()
            await engine.within(caller.conn).start("order", key="o-5", input={"sku": "E"})
            await caller.commit()
            await caller.begin()
            await caller.insert_order("r-1")
            with pytest.raises(ConcurrencyError):
                await engine.within(caller.conn).start("order", key="o-5", input={"sku": "F"})
            await caller.insert_order("r-2")
            await caller.commit()
            assert _committed_orders(caller) == ["r-1", "r-2"]
            assert len(engine.store.audit_records()) == 1

    asyncio.run(main())


def test_sqlite_refuses_another_file_an_attached_journal_and_attached_files(
    tmp_path: Path,
) -> None:
    """Goal: only a connection whose main database is the journal file, with nothing
    attached, may be lent: a commit across attached WAL files is atomic per file only.

    Method: lend a connection to another file, one to another file with the journal ATTACHed,
    and one to the journal with another file ATTACHed; each is refused before any write.
    """
    path = tmp_path / "journal.db"

    async def main() -> None:
        async with lf.Engine(f"sqlite:///{path}", shop()) as engine:
            other = sqlite3.connect(tmp_path / "app.db")
            other.execute("CREATE TABLE orders (id TEXT)")
            other.execute("INSERT INTO orders VALUES ('x')")
            with pytest.raises(ForeignConnectionError):
                await engine.within(other).start("order", key="k", input={"sku": "A"})
            other.rollback()
            other.execute(f"ATTACH DATABASE '{path}' AS journal")
            other.execute("INSERT INTO orders VALUES ('x')")
            with pytest.raises(ForeignConnectionError, match="main database"):
                await engine.within(other).start("order", key="k", input={"sku": "A"})
            other.rollback()
            other.close()
            own = sqlite3.connect(path)
            own.execute(f"ATTACH DATABASE '{tmp_path / 'app.db'}' AS app")
            own.execute("INSERT INTO app.orders VALUES ('y')")
            with pytest.raises(ForeignConnectionError, match="attached"):
                await engine.within(own).start("order", key="k", input={"sku": "A"})
            own.rollback()
            own.close()
            assert await engine.list() == []

    asyncio.run(main())


@pytest.mark.postgres
def test_postgres_refuses_a_connection_to_another_database(request: pytest.FixtureRequest) -> None:
    """Goal: a psycopg connection to another database than the journal's is refused (the
    marker read through it is not the store's), with nothing written.

    Method: the engine's journal is in the test database; lend a connection to the server's
    ``postgres`` database.
    """
    import psycopg

    url = postgres_url(request.node.nodeid)
    base = url.partition("?")[0]
    other = base.rsplit("/", 1)[0] + "/postgres"

    async def main() -> None:
        async with lf.Engine(url, shop()) as engine:
            with psycopg.connect(other) as conn, pytest.raises(ForeignConnectionError):
                await engine.within(conn).start("order", key="k", input={"sku": "A"})
            assert await engine.list() == []

    asyncio.run(main())


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_autocommit_connection_is_refused(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: a connection in autocommit mode with no transaction open is refused: the
    engine would have to commit on its own, which it never does.

    Method: sqlite3 with ``isolation_level=None``, psycopg with ``autocommit=True``.
    """

    async def main() -> None:
        async with setting(kind, request, tmp_path) as (engine, caller):
            options: dict[str, Any] = (
                {"isolation_level": None} if kind == "sqlite" else {"autocommit": True}
            )
            async with connected(kind, caller.url, caller.table, **options) as conn:
                with pytest.raises(NoTransactionError):
                    await engine.within(conn).start("order", key="k", input={"sku": "A"})
            assert await engine.list() == []

    asyncio.run(main())


def test_sqlite_two_callers_one_key_deferred_and_immediate(tmp_path: Path) -> None:
    """Goal: two callers starting one key make one instance, with no deadlock, under SQLite's
    BEGIN IMMEDIATE and BEGIN DEFERRED; a DEFERRED snapshot older than the other's commit is
    RetryTransactionError (never a wrong answer), and its retry finds the instance.

    Method: IMMEDIATE: the second caller begins on a thread while the first holds the lock,
    waits, and finds the instance. DEFERRED: the second reads first (its snapshot), the first
    commits, the second's start is refused; rolled back and run again, it finds the instance.
    """
    path = tmp_path / "journal.db"
    registry = shop()
    with lf.SyncEngine(f"sqlite:///{path}", registry) as engine:
        engine.store.get_instance(InstanceId("warm"))  # the journal exists now
        first, second = sqlite3.connect(path), sqlite3.connect(path, check_same_thread=False)
        first.execute("BEGIN IMMEDIATE")
        a = engine.within(first).start("order", key="k-1", input={"sku": "A"})
        answers: list[Any] = []

        def other() -> None:
            second.execute("BEGIN IMMEDIATE")  # waits for the first's commit
            answers.append(engine.within(second).start("order", key="k-1", input={"sku": "A"}))
            second.commit()

        thread = threading.Thread(target=other)
        thread.start()
        first.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
        [b] = answers
        assert a.created
        assert not b.created
        assert a.instance_id == b.instance_id

        first.execute("BEGIN DEFERRED")
        second.execute("BEGIN DEFERRED")
        second.execute("SELECT count(*) FROM lf_instances").fetchall()  # its snapshot
        c = engine.within(first).start("order", key="k-2", input={"sku": "A"})
        first.commit()
        with pytest.raises(RetryTransactionError):
            engine.within(second).start("order", key="k-2", input={"sku": "A"})
        second.rollback()
        second.execute("BEGIN DEFERRED")
        d = engine.within(second).start("order", key="k-2", input={"sku": "A"})
        second.commit()
        assert c.created
        assert not d.created
        assert c.instance_id == d.instance_id
        assert len(engine.list()) == 2
        first.close()
        second.close()


@pytest.mark.postgres
@pytest.mark.parametrize("level", ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"])
def test_postgres_two_callers_one_key_under_each_isolation_level(
    level: str, request: pytest.FixtureRequest
) -> None:
    """Goal: two callers starting one key under each isolation level make one instance, with
    no deadlock; under REPEATABLE READ and SERIALIZABLE a conflict the second caller's
    snapshot cannot see is RetryTransactionError, whose retry finds the instance; under READ
    COMMITTED it finds the instance at once.

    Method: (1) the second caller's start waits on the first's uncommitted key (seen waiting
    in pg_stat_activity), the first commits; (2) the second caller takes its snapshot before
    the first commits and starts after. Both callers are psycopg sync connections on the
    caller's side of the test (the second on a thread).
    """
    import psycopg

    url = postgres_url(request.node.nodeid)
    base = url.partition("?")[0]
    retries = level != "READ COMMITTED"
    with (
        lf.SyncEngine(url, shop()) as engine,
        psycopg.connect(base) as first,
        psycopg.connect(base) as second,
        psycopg.connect(base, autocommit=True) as watcher,
    ):
        engine.store.get_instance(InstanceId("warm"))
        second_pid = second.info.backend_pid

        def start(conn: psycopg.Connection[Any], key: str) -> lf.Started:
            return engine.within(conn).start("order", key=key, input={"sku": "A"})

        def begin(conn: psycopg.Connection[Any]) -> None:
            conn.execute(f"BEGIN ISOLATION LEVEL {level}")
            conn.execute("SELECT 1").fetchall()  # the snapshot, under RR and SERIALIZABLE

        # (1) The second waits on the first's key.
        begin(first)
        a = start(first, "k-1")
        begin(second)
        answers: list[Any] = []

        def other() -> None:
            try:
                answers.append(start(second, "k-1"))
            except RetryTransactionError as exc:
                answers.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        eventually(
            lambda: watcher.execute(WAITING_ON_A_LOCK, (second_pid,)).fetchone(),
            what="the second caller waiting on the first's key",
        )
        first.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
        [b] = answers
        if retries:
            assert isinstance(b, RetryTransactionError)
            second.rollback()
            begin(second)
            b = start(second, "k-1")
        second.commit()
        assert isinstance(b, lf.Started)
        assert a.created
        assert not b.created
        assert a.instance_id == b.instance_id

        # (2) The second's snapshot is older than the first's commit.
        begin(first)
        begin(second)
        c = start(first, "k-2")
        first.commit()
        if retries:
            with pytest.raises(RetryTransactionError):
                start(second, "k-2")
            second.rollback()
            begin(second)
        d = start(second, "k-2")
        second.commit()
        assert c.created
        assert not d.created
        assert c.instance_id == d.instance_id
        assert len(engine.list()) == 2


@pytest.mark.postgres
def test_postgres_search_path_of_the_caller_is_kept(request: pytest.FixtureRequest) -> None:
    """Goal: the engine writes into its journal's schema whatever the caller's search_path,
    and gives the caller its own path back after each call (never the session's).

    Method: a caller whose path is public starts an instance; its path is public after.
    """
    import psycopg

    url = postgres_url(request.node.nodeid)
    with lf.SyncEngine(url, shop()) as engine, psycopg.connect(url.partition("?")[0]) as conn:
        conn.execute("SET search_path TO public")
        conn.execute("SELECT 1")
        engine.within(conn).start("order", key="k", input={"sku": "A"})
        assert conn.execute("SHOW search_path").fetchone() == ("public",)
        conn.commit()
        assert len(engine.list()) == 1


def test_sqlalchemy_session_and_connection_are_lent(tmp_path: Path) -> None:
    """Goal: a SQLAlchemy Session (and a Connection) over the journal file joins its
    transaction: committed with the session's own writes, gone with its rollback.

    Method: one session commits a row and a start; another rolls back a row and a start.
    """
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    path = tmp_path / "journal.db"
    with lf.SyncEngine(f"sqlite:///{path}", shop()) as engine:
        engine.store.get_instance(InstanceId("warm"))
        db = sqlalchemy.create_engine(f"sqlite:///{path}")
        with db.begin() as connection:
            connection.execute(sqlalchemy.text("CREATE TABLE orders (id TEXT PRIMARY KEY)"))
        with Session(db) as session:
            session.execute(sqlalchemy.text("INSERT INTO orders VALUES ('s-1')"))
            tx = engine.within(session)
            tx.start("order", key="s-1", input={"sku": "A"})
            session.commit()
            tx.committed()
        with db.connect() as connection:
            connection.execute(sqlalchemy.text("INSERT INTO orders VALUES ('s-2')"))
            tx = engine.within(connection)
            tx.start("order", key="s-2", input={"sku": "A"})
            connection.rollback()
            assert tx.state() is WithinState.ROLLED_BACK
        with db.connect() as connection:
            rows = connection.execute(sqlalchemy.text("SELECT id FROM orders")).all()
        assert [r[0] for r in rows] == ["s-1"]
        assert [r.business_key for r in engine.list()] == ["s-1"]
        db.dispose()


# -- the caller SIGKILLed with its transaction open (a real process) ------------------------

CALLER = """
import asyncio, sys, sqlite3
import ledgerflow as lf
from test_transactional_start import shop

async def main(kind, url, table):
    async with lf.Engine(url, shop()) as engine:
        if kind == "sqlite":
            conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        else:
            import psycopg
            conn = psycopg.connect(url.partition("?")[0])
        conn.execute(f"INSERT INTO {table} (id) VALUES ('killed')")
        started = await engine.within(conn).start("order", key="killed", input={"sku": "K"})
        print(started.instance_id, flush=True)
        sys.stdin.readline()  # holds the transaction open until it is killed

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ["sqlite", pytest.param("postgres-sync", marks=pytest.mark.postgres)]
)
def test_a_caller_killed_before_its_commit_leaves_nothing(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: a caller SIGKILLed with its transaction open (its row and its start written,
    not committed) leaves no instance, no audit record and no row; the key then starts
    afresh, and a worker runs it once committed.

    Method: a real caller process starts inside its transaction, prints the instance id and
    blocks; it is SIGKILLed; the journal is read through a new engine.
    """

    async def main() -> None:
        async with setting(kind, request, tmp_path) as (engine, caller):
            folder = tmp_path / "caller"
            folder.mkdir()
            (folder / "caller.py").write_text(CALLER)
            env = child_environment(Path(__file__).parent)
            with subprocess.Popen(
                [sys.executable, str(folder / "caller.py"), kind, caller.url, caller.table],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
            ) as process:
                try:
                    assert process.stdout is not None
                    instance_id = process.stdout.readline().strip()
                    assert instance_id.startswith("wf_")
                finally:
                    process.send_signal(signal.SIGKILL)
                    process.wait(timeout=30)
            async with lf.Engine(caller.url, shop()) as fresh:
                with pytest.raises(InstanceNotFoundError):
                    await fresh.get(instance_id)
                assert fresh.store.audit_records() == []
            assert _committed_orders(caller) == []

            await caller.begin()
            await caller.insert_order("killed")
            tx = engine.within(caller.conn)
            started = await tx.start("order", key="killed", input={"sku": "K"})
            assert started.created
            assert started.instance_id == instance_id
            await caller.commit()
            await tx.committed()
            await _drain(engine)
            assert (await engine.result(instance_id, timeout=10))["sku"] == "K"

    asyncio.run(main())


def test_the_sync_face_has_the_same_rules(tmp_path: Path) -> None:
    """Goal: ``SyncEngine.within`` is the same: invisible before the commit, NotCommittedError
    from ``committed()`` until then, the instance there after.

    Method: a sqlite3 connection in its default mode (the transaction begins at the engine's
    first write, as the sqlite3 module would begin it at the caller's).
    """
    path = tmp_path / "journal.db"
    with lf.SyncEngine(f"sqlite:///{path}", shop()) as engine:
        engine.store.get_instance(InstanceId("warm"))
        conn = sqlite3.connect(path)
        tx = engine.within(conn)
        started = tx.start("order", key="y-1", input={"sku": "A"})
        assert conn.in_transaction
        assert engine.store.get_instance(started.instance_id) is None
        with pytest.raises(NotCommittedError):
            tx.committed()
        conn.commit()
        tx.committed()
        assert engine.get(started.instance_id).business_key == "y-1"
        conn.close()


@pytest.mark.postgres
def test_sqlalchemy_over_psycopg_joins_the_session(request: pytest.FixtureRequest) -> None:
    """Goal: a SQLAlchemy Session over psycopg (``postgresql+psycopg://``) joins its
    transaction as the plain psycopg connection does.

    Method: a session inserts its row and starts; before its commit the store sees nothing,
    after it both are there.
    """
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    url = postgres_url(request.node.nodeid)
    base = url.partition("?")[0]
    table = _app_table(request.node.nodeid)
    with lf.SyncEngine(url, shop()) as engine:
        engine.store.get_instance(InstanceId("warm"))
        db = sqlalchemy.create_engine(base.replace("postgresql://", "postgresql+psycopg://", 1))
        with db.begin() as connection:
            connection.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {table}"))
            connection.execute(sqlalchemy.text(f"CREATE TABLE {table} (id TEXT PRIMARY KEY)"))
        with Session(db) as session:
            session.execute(sqlalchemy.text(f"INSERT INTO {table} VALUES ('q-1')"))
            tx = engine.within(session, actor="service:orders")
            started = tx.start("order", key="q-1", input={"sku": "A"})
            assert engine.store.get_instance(started.instance_id) is None
            session.commit()
            tx.committed()
        assert engine.get(started.instance_id).business_key == "q-1"
        with db.connect() as connection:
            rows = connection.execute(sqlalchemy.text(f"SELECT id FROM {table}")).all()
        assert [r[0] for r in rows] == ["q-1"]
        db.dispose()


@pytest.mark.postgres
def test_postgres_an_open_transaction_holds_only_its_own_key(
    request: pytest.FixtureRequest,
) -> None:
    """Goal: a caller's transaction left open holds only the business keys it started: other
    callers' starts of other keys, and the engine's own starts, go on beside it.

    Method: caller A starts k-1 and stays open; caller B (lock_timeout 2 s, so a wait would
    fail rather than hang) starts k-2 and commits, and the engine starts k-3; then A commits.
    """
    import psycopg

    url = postgres_url(request.node.nodeid)
    base = url.partition("?")[0]
    with (
        lf.SyncEngine(url, shop()) as engine,
        psycopg.connect(base) as first,
        psycopg.connect(base) as second,
    ):
        engine.store.get_instance(InstanceId("warm"))
        engine.within(first).start("order", key="k-1", input={"sku": "A"})
        second.execute("SET lock_timeout = '2s'")
        engine.within(second).start("order", key="k-2", input={"sku": "A"})
        second.commit()
        engine.start("order", key="k-3", input={"sku": "A"})
        assert sorted(r.business_key for r in engine.list()) == ["k-2", "k-3"]
        first.commit()
        assert sorted(r.business_key for r in engine.list()) == ["k-1", "k-2", "k-3"]


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["postgres-sync", "postgres-async"])
def test_postgres_two_callers_on_one_event_loop_do_not_deadlock(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: two callers on one event loop start one key: the second's start waits for the
    first's commit off the loop, so the first can still commit; one instance.

    Method: A starts k and stays open; B's start is a task, seen waiting on A's key in
    pg_stat_activity; A commits on the same loop; B finds A's instance.
    """

    async def main() -> None:
        async with (
            setting(kind, request, tmp_path) as (engine, a),
            connected(kind, a.url, a.table) as conn,
        ):
            b = Caller(kind=kind, url=a.url, conn=conn, table=a.table)
            pid = b.conn.info.backend_pid
            await a.begin()
            await b.begin()
            first = await engine.within(a.conn).start("order", key="k", input={"sku": "A"})
            second = asyncio.create_task(
                engine.within(b.conn).start("order", key="k", input={"sku": "A"})
            )
            import psycopg

            with psycopg.connect(a.url.partition("?")[0], autocommit=True) as watcher:

                async def waiting() -> bool:
                    row = watcher.execute(WAITING_ON_A_LOCK, (pid,)).fetchone()
                    return row is not None

                await until(waiting, what="the second caller waiting on the first's key")
            await a.commit()
            found = await asyncio.wait_for(second, timeout=30)
            await b.commit()
            assert first.created
            assert not found.created
            assert found.instance_id == first.instance_id
            assert len(await engine.list()) == 1

    asyncio.run(main())


@pytest.mark.parametrize(
    "level",
    [
        "sqlite",
        pytest.param("REPEATABLE READ", marks=pytest.mark.postgres),
        pytest.param("SERIALIZABLE", marks=pytest.mark.postgres),
    ],
)
def test_a_snapshot_that_cannot_see_the_instance_asks_for_a_retry(
    level: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Goal: a signal or cancel inside a transaction whose snapshot was taken before the
    instance committed is RetryTransactionError, not "no such instance": the store's own
    connection sees it, so "not found" would be a wrong answer.

    Method: the caller's transaction takes its snapshot (SQLite BEGIN DEFERRED and a read;
    PostgreSQL REPEATABLE READ or SERIALIZABLE and a read); the engine then starts the
    instance; the caller's signal and cancel are refused with a retry, and the retry works.
    """
    kind = "sqlite" if level == "sqlite" else "postgres-sync"
    url = _journal(kind, request, tmp_path)
    with lf.SyncEngine(url, shop()) as engine:
        engine.store.get_instance(InstanceId("warm"))
        if kind == "sqlite":
            conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"))
            begin = "BEGIN DEFERRED"
        else:
            import psycopg

            conn = psycopg.connect(url.partition("?")[0])
            begin = f"BEGIN ISOLATION LEVEL {level}"
        conn.execute(begin)
        conn.execute("SELECT 1").fetchall()  # the snapshot (SQLite: at the first read)
        if kind == "sqlite":
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        started = engine.start("order", key="late", input={"sku": "A", "wait": True})
        with pytest.raises(RetryTransactionError):
            engine.within(conn).signal(started.instance_id, "go", event_id="e-1")
        with pytest.raises(RetryTransactionError):
            engine.within(conn).cancel(started.instance_id, reason="changed my mind")
        conn.rollback()
        conn.execute(begin)
        engine.within(conn).signal(started.instance_id, "go", event_id="e-1")
        conn.commit()
        assert [e.event_id for e in engine.store.inbox(started.instance_id)] == ["e-1"]
        conn.execute(begin)
        with pytest.raises(InstanceNotFoundError) as missing:
            engine.within(conn).signal("wf_nothing_here", "go", event_id="e-2")
        assert not isinstance(missing.value, RetryTransactionError)
        conn.rollback()
        conn.close()


# -- the fault explorer: a caller that dies before its COMMIT at every point -----------------


class _Counted(RolledBackCallers):
    """The explorer's rolled-back callers, counted (and, for the oracle's own test, made to
    commit instead)."""

    made: ClassVar[list[RolledBackCallers]] = []
    commit_all = False

    def __init__(self, path: str) -> None:
        super().__init__(path, commit=self.commit_all)
        self.made.append(self)


@pytest.mark.slow
@pytest.mark.simulated
@pytest.mark.parametrize("commit", [False, True], ids=["rolled-back", "oracle-sees-a-commit"])
def test_the_explorer_kills_a_caller_before_its_commit_at_every_point(
    commit: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: at every fault point of an order's run (arrivals mode: a cancel, then a signal,
    at each hit), a service's transaction that started an instance, signalled and asked to
    cancel the order through ``within`` and died before its COMMIT leaves nothing visible
    (oracle ``rolled_back_invisible``); and the oracle is not blind: callers made to commit
    instead are all caught.

    Method: the explorer's arrivals mode on the demo order; count the callers that arrived
    and wrote (not told to retry because the worker held the write lock at that point).
    """
    from ledgerflow.demo.order import registry, sample_order
    from ledgerflow.testing import Explorer, scenario_for, simulation

    _Counted.made, _Counted.commit_all = [], commit
    monkeypatch.setattr(simulation, "RolledBackCallers", _Counted)
    explorer = Explorer(scenario_for(registry, "order", [sample_order(1)]), folder=tmp_path)
    summary = asyncio.run(explorer.arrivals())
    arrived = sum(c.arrived for c in _Counted.made)
    wrote = arrived - sum(c.retried for c in _Counted.made)
    assert arrived == summary.outside.cancels + summary.outside.signals > 10
    assert wrote > arrived // 2  # most points are outside the worker's own write transaction
    caught = [
        v for f in summary.failures for v in f.violations if v.invariant == "rolled_back_invisible"
    ]
    print(json.dumps({"callers": arrived, "wrote": wrote, "runs": summary.runs}))
    if commit:
        # Every run whose caller wrote and committed is caught.
        assert len({f.label for f in summary.failures}) == wrote
        assert caught
    else:
        assert summary.failures == [], [str(v) for f in summary.failures for v in f.violations]
