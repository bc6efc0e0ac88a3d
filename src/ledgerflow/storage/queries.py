"""Loads the named SQL blocks of a dialect once (internal).

A block starts with ``-- name: <query_name>``; the comment lines after it describe the query
and the statement runs to the next block. Both dialects define the same names (a test holds
them to that). A block whose statement is the same in every dialect is written once, in
``sql/portable/`` (the same file names by concern); a dialect's folder holds only the blocks it
writes its own way, and a name may be in one of the two folders, never both. Every file writes
``:name`` placeholders; PostgreSQL's are converted on loading.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

_BLOCK = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def parse_blocks(text: str) -> dict[str, str]:
    names = _BLOCK.findall(text)
    bodies = _BLOCK.split(text)[2::2]
    queries: dict[str, str] = {}
    for name, body in zip(names, bodies, strict=True):
        statement = "\n".join(
            line for line in body.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if name in queries:
            raise ValueError(f"query {name} is defined twice")
        queries[name] = statement.rstrip(";")
    return queries


# ":name" placeholders, as both dialects' files write them; psycopg wants "%(name)s".
_PLACEHOLDER = re.compile(r"(?<![:\w]):([a-z_]+)")


def to_pyformat(sql: str) -> str:
    return _PLACEHOLDER.sub(r"%(\1)s", sql)


PORTABLE = "portable"


@cache
def load(dialect: str) -> dict[str, str]:
    return load_tree(resources.files("ledgerflow.storage").joinpath("sql"), dialect)


def load_tree(root: Traversable, dialect: str) -> dict[str, str]:
    """The named queries of a dialect: ``root/portable``'s blocks and ``root/<dialect>``'s."""
    if dialect == PORTABLE:
        raise ValueError(f"{PORTABLE} holds the queries every dialect shares; it is no dialect")
    shared = _folder_queries(root.joinpath(PORTABLE))
    own = _folder_queries(root.joinpath(dialect))
    both = sorted(shared.keys() & own.keys())
    if both:
        raise ValueError(
            f"queries {', '.join(both)} are defined in both {PORTABLE} and {dialect}:"
            " a name is written once, in one of the two"
        )
    queries = shared | own
    if dialect == "postgres":
        return {name: to_pyformat(sql) for name, sql in queries.items()}
    return queries


def _folder_queries(folder: Traversable) -> dict[str, str]:
    queries: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, sql in parse_blocks(entry.read_text()).items():
                if name in queries:
                    raise ValueError(f"query {name} is defined in two files of {folder.name}")
                queries[name] = sql
    return queries


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """(number, name, text) of every migration of a dialect, in order."""
    folder = resources.files("ledgerflow.storage").joinpath("sql", dialect, "migrations")
    found: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{4})_([a-z0-9_]+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    found.sort()
    numbers = [n for n, _, _ in found]
    # Unique and from 1; a gap is a number reserved by work not merged yet (each migration is
    # applied by its number when the journal lacks it, so one filling a gap later still runs).
    if len(set(numbers)) != len(numbers) or (numbers and numbers[0] != 1):
        raise ValueError(f"{dialect} migrations are not numbered uniquely from 1: {numbers}")
    return found
