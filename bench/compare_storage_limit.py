"""The raw storage limit: how many single-row durable commits per second the storage takes.

SQLite: a fresh file in WAL mode with ``synchronous=FULL``, one connection, ``INSERT`` then
``COMMIT`` in a loop. PostgreSQL: a fresh schema, autocommit ``INSERT`` with
``synchronous_commit=on`` (read back from each session), with 1 client and with 8 clients (one
thread and connection each; psycopg releases the GIL while it waits for the server).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

PG_CLIENTS_MANY = 8


def sqlite_commits_per_second(folder: str, seconds: float) -> dict[str, Any]:
    path = os.path.join(folder, "storage-limit.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        settings = {
            "journal_mode": str(conn.execute("PRAGMA journal_mode").fetchone()[0]),
            "synchronous": str(conn.execute("PRAGMA synchronous").fetchone()[0]),
        }
        commits = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t (v) VALUES (?)", ("x" * 32,))
            conn.execute("COMMIT")
            commits += 1
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    return {
        "commits_per_second": round(commits / elapsed, 1),
        "commits": commits,
        "seconds": round(elapsed, 3),
        "settings": settings,
    }


def _pg_client(url: str, table: sql.Composable, deadline: float, out: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        if row is None or row[0] != "on":
            raise RuntimeError(f"synchronous_commit is {row}, not on")
        commits = 0
        statement = sql.SQL("INSERT INTO {} (v) VALUES (%s)").format(table)
        while time.perf_counter() < deadline:
            conn.execute(statement, ("x" * 32,))
            commits += 1
        out.append(commits)


def pg_commits_per_second(base_url: str, schema: str, clients: int, seconds: float) -> float:
    table = sql.Identifier(schema, f"t{clients}")
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id bigserial PRIMARY KEY, v text NOT NULL)").format(table)
        )
    counts: list[int] = []
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=_pg_client, args=(base_url, table, t0 + seconds, counts))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if len(counts) != clients:
        raise RuntimeError("a PostgreSQL client of the storage limit failed")
    return round(sum(counts) / elapsed, 1)


def pg_limits(base_url: str, schema: str, seconds: float) -> dict[str, Any]:
    return {
        "commits_per_second_1_client": pg_commits_per_second(base_url, schema, 1, seconds),
        f"commits_per_second_{PG_CLIENTS_MANY}_clients": pg_commits_per_second(
            base_url, schema, PG_CLIENTS_MANY, seconds
        ),
        "seconds_each": seconds,
    }
