"""Every row of every table of a journal, to compare a whole database before and after a
command that must change nothing (SQLite file or PostgreSQL schema, by the journal's URL)."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import parse_qs, urlsplit


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    if url.startswith("sqlite:///"):
        connection = sqlite3.connect(url.removeprefix("sqlite://").split("?")[0])
        try:
            tables = [
                r[0]
                for r in connection.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
            return {
                t: sorted(connection.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in tables
            }
        finally:
            connection.close()
    import psycopg

    parts = urlsplit(url)
    schema = parse_qs(parts.query)["schema"][0]
    base = parts._replace(query="").geturl()
    with psycopg.connect(base) as connection:
        tables = [
            r[0]
            for r in connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "ORDER BY table_name",
                (schema,),
            )
        ]
        return {
            t: sorted(connection.execute(f'SELECT * FROM "{schema}"."{t}"').fetchall(), key=repr)
            for t in tables
        }
