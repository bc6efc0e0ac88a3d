"""Counting durable write transactions, the same way for both engines, from outside them.

SQLite: every commit in WAL mode appends a frame whose header holds the database size after
the commit (non-zero only on a transaction's last frame). Before the workload, a reader opens
a read transaction on the file and keeps it: while it is open no checkpoint can complete, so
the WAL is never rewound and every commit of the workload stays in the file. The commit frames
are counted before and after. (If the WAL was fully checkpointed when the reader opened, the
next writer rewinds it once, under a new salt; then every frame after is the workload's.)

PostgreSQL: a transaction that writes gets an xid and a COMMIT record in the WAL, flushed
before the commit returns with ``synchronous_commit=on``; one that only reads writes nothing.
``pg_walinspect`` lists the WAL records between two LSNs; the count is the COMMIT records whose
transaction (or one of its subtransactions) wrote a block of a relation in the run's own
schema, so other sessions on a shared server are not counted. The same pass sums the WAL bytes
those transactions wrote (every record of theirs, their COMMIT included), plus the records
without a transaction that touch the schema's tables (pruning, hint-bit page images):
``wal_bytes`` after ``end()`` (see ``compare_db_cost.py``).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import struct
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

WAL_HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
BLOCK_REF = re.compile(r"rel \d+/(\d+)/(\d+)")
SUBXACTS = re.compile(r"subxacts:((?: \d+)+)")


@dataclass(frozen=True)
class WalState:
    salt: bytes
    commits: int


def read_wal(path: str) -> WalState:
    """The salt of the WAL's current generation and the commit frames written in it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return WalState(salt=b"", commits=0)
    if len(data) < WAL_HEADER_BYTES:
        return WalState(salt=b"", commits=0)
    page_size = struct.unpack(">I", data[8:12])[0]
    salt = data[16:24]
    commits = 0
    offset = WAL_HEADER_BYTES
    while offset + FRAME_HEADER_BYTES + page_size <= len(data):
        header = data[offset : offset + FRAME_HEADER_BYTES]
        if header[8:16] != salt:
            break  # a frame of an earlier generation: the current one ends here
        if struct.unpack(">I", header[4:8])[0] != 0:
            commits += 1
        offset += FRAME_HEADER_BYTES + page_size
    return WalState(salt=salt, commits=commits)


class SqliteWriteCounter:
    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.wal_path = db_path + "-wal"
        self._reader: sqlite3.Connection | None = None
        self._before = WalState(salt=b"", commits=0)

    def begin(self) -> None:
        self._reader = sqlite3.connect(self.db_path, isolation_level=None)
        self._reader.execute("BEGIN")
        self._reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        self._before = read_wal(self.wal_path)

    def costs(self) -> dict[str, Any] | None:
        return None  # PostgreSQL's CPU and WAL only (compare_db_cost.py)

    def end(self) -> int:
        after = read_wal(self.wal_path)
        if self._reader is not None:
            self._reader.execute("COMMIT")
            self._reader.close()
            self._reader = None
        if after.salt == self._before.salt:
            return after.commits - self._before.commits
        return after.commits


class PgWriteCounter:
    def __init__(self, base_url: str, schema: str, walinspect_schema: str) -> None:
        self.base_url = base_url
        self.schema = schema
        self.walinspect_schema = walinspect_schema
        self._start = ""
        self._holder: psycopg.Connection[tuple[object, ...]] | None = None
        self.wal_bytes = 0

    def begin(self) -> None:
        # A temporary replication slot, held by this connection until end(), keeps the
        # server from recycling the run's WAL before it is read: a slow run on a busy server
        # otherwise outlived its first segments (max_wal_size). Without the right to make
        # one (no REPLICATION, no free slot) the count is taken as before, at that risk.
        self._holder = psycopg.connect(self.base_url, autocommit=True)
        with contextlib.suppress(psycopg.Error):
            self._holder.execute(
                "SELECT pg_create_physical_replication_slot(%s, true, true)",
                (f"lf_bench_{os.getpid()}_{id(self)}",),
            )
        row = self._holder.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        self._start = str(row[0])

    def end(self) -> int:
        assert self._holder is not None
        with self._holder as conn:
            row = conn.execute(
                "SELECT pg_current_wal_flush_lsn()::text, "
                "(SELECT oid FROM pg_database WHERE datname = current_database())::text"
            ).fetchone()
            assert row is not None
            stop, database = str(row[0]), str(row[1])
            ours = self._relfilenodes(conn)
            query = sql.SQL(
                "SELECT xid::text, resource_manager, record_type, description, block_ref, "
                "record_length FROM {}.pg_get_wal_records_info(%s, %s)"
            ).format(sql.Identifier(self.walinspect_schema))
            records = conn.execute(query, (self._start, stop)).fetchall()
        writers: set[str] = set()
        commits: list[tuple[str, str]] = []
        untransacted = 0  # bytes of records with no xid that touch the schema's tables
        for xid, manager, kind, description, block_ref, _ in records:
            if manager == "Transaction" and str(kind).startswith("COMMIT"):
                commits.append((str(xid), str(description or "")))
                continue
            for db, node in BLOCK_REF.findall(str(block_ref or "")):
                if db == database and node in ours:
                    writers.add(str(xid))
                    break
        counted = 0
        theirs: set[str] = set()
        for xid, description in commits:
            found = SUBXACTS.search(description)
            subxacts = found.group(1).split() if found else []
            if xid in writers or any(s in writers for s in subxacts):
                counted += 1
                theirs.update((xid, *subxacts))
        for xid, _, _, _, block_ref, length in records:
            if str(xid) in theirs:
                self.wal_bytes += int(length)
            elif str(xid) == "0" and any(
                db == database and node in ours
                for db, node in BLOCK_REF.findall(str(block_ref or ""))
            ):
                untransacted += int(length)
        self.wal_bytes += untransacted
        return counted

    def _relfilenodes(self, conn: psycopg.Connection[tuple[object, ...]]) -> set[str]:
        """The storage files of every table and index of the schema, and of their TOAST."""
        rows = conn.execute(
            """
            WITH own AS (
                SELECT c.oid, c.reltoastrelid FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s
            ), toast AS (
                SELECT reltoastrelid AS oid FROM own WHERE reltoastrelid <> 0
            ), toast_index AS (
                SELECT indexrelid AS oid FROM pg_index WHERE indrelid IN (SELECT oid FROM toast)
            )
            SELECT pg_relation_filenode(oid)::text FROM (
                SELECT oid FROM own UNION SELECT oid FROM toast UNION SELECT oid FROM toast_index
            ) AS r
            """,
            (self.schema,),
        ).fetchall()
        return {str(r[0]) for r in rows if r[0] is not None}


WALINSPECT_SCHEMA = "ledgerflow_bench_walinspect"
WALINSPECT_LOCK = 0x4C46_5741  # an advisory lock key of our own: "LFWA"


def ensure_walinspect(base_url: str) -> str | tuple[str]:
    """The schema holding pg_walinspect's functions, installing the extension into a schema of
    its own if the database does not have it yet; or ``(why it cannot be,)`` (not a superuser,
    contrib not installed), for the JSON.

    The extension is one per database and shared by every run on it, so it is never dropped:
    a run that dropped it would pull it from under another run reading the WAL at the same
    time (two benchmark runs on one server, or a test beside a manual run). Creation is
    serialised by an advisory lock so that two runs starting together do not race."""
    try:
        with psycopg.connect(base_url, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (WALINSPECT_LOCK,))
            try:
                row = conn.execute(
                    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                    "ON n.oid = e.extnamespace WHERE e.extname = 'pg_walinspect'"
                ).fetchone()
                if row is not None:
                    return str(row[0])
                name = sql.Identifier(WALINSPECT_SCHEMA)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
                conn.execute(sql.SQL("CREATE EXTENSION pg_walinspect SCHEMA {}").format(name))
                return WALINSPECT_SCHEMA
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (WALINSPECT_LOCK,))
    except psycopg.Error as exc:
        return (f"pg_walinspect unavailable: {exc}".strip(),)
