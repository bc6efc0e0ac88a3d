"""Participant databases for the kit's tests: a real SQLite file, or a fresh schema of the real
PostgreSQL server (skipped with the reason when none is configured), each with a ``business``
table the tests' business writes insert into."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledgerflow.participant import Kit
from postgres_schema import ENVIRONMENT_VARIABLE

BUSINESS = "CREATE TABLE IF NOT EXISTS business (namespace TEXT, key TEXT, kind TEXT, attempt INT)"


@dataclass
class Database:
    """Where the kit keeps its table; ``url`` is a SQLite path or a PostgreSQL conninfo."""

    url: str
    opened: list[Kit[Any]] = field(default_factory=list)

    @property
    def postgres(self) -> bool:
        return self.url.startswith("postgresql://")

    def kit(
        self, namespace: str, retention: timedelta = timedelta(days=1), **options: Any
    ) -> Kit[Any]:
        kit: Kit[Any]
        if self.postgres:
            kit = Kit.postgres(self.url, namespace=namespace, retention=retention, **options)
        else:
            kit = Kit.sqlite(self.url, namespace=namespace, retention=retention, **options)
        self.opened.append(kit)
        return kit

    def close(self) -> None:
        for kit in self.opened:
            kit.close()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        if self.postgres:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as pg:
                yield pg
        else:
            with contextlib.closing(sqlite3.connect(self.url, isolation_level=None)) as db:
                yield db

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.postgres:
            sql = sql.replace("?", "%s")
        with self.connection() as db:
            return [tuple(row) for row in db.execute(sql, params).fetchall()]


def mark(db: Any) -> str:
    """The parameter mark of a connection's driver."""
    return "?" if isinstance(db, sqlite3.Connection) else "%s"


def postgres_database(test_name: str) -> Database:
    base = os.environ.get(ENVIRONMENT_VARIABLE)
    if not base:
        pytest.skip(f"PostgreSQL tests need {ENVIRONMENT_VARIABLE}")
    import psycopg

    owner = f"{test_name} {os.environ.get('PYTEST_XDIST_WORKER', '')}"
    schema = "k_" + hashlib.sha256(owner.encode()).hexdigest()[:20]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    joiner = "&" if "?" in base else "?"
    return Database(f"{base}{joiner}options=-csearch_path%3D{schema}")


def make_database(backend: str, test_name: str, folder: Path) -> Database:
    database = (
        Database(str(folder / "participant.db"))
        if backend == "sqlite"
        else postgres_database(test_name)
    )
    with database.connection() as db:
        db.execute(BUSINESS)
    return database
