"""Ratchets on the shape of the code (docs/style.md), checked by reading the source, not running it.

Each rule here was true when it was written; the allow-lists name every known exception with a
reason and a ceiling, so an exception can shrink or go away but not grow, and a new one cannot
appear silently. When an allowed exception is fixed, its entry must be removed (the test says so).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledgerflow.storage import queries
from source_imports import PACKAGE, ROOT, SRC, imported_modules, relative, sources

SQL = PACKAGE / "storage" / "sql"

MODULE_LINES_MAX = 600
FUNCTION_LINES_MAX = 70


@dataclass(frozen=True)
class Allowed:
    lines_max: int
    reason: str


# "path/relative/to/src/ledgerflow.py::Qualified.name" -> ceiling and why it is allowed for now.
LONG_FUNCTIONS: dict[str, Allowed] = {
    "cli/demo.py::Demo.report": Allowed(
        111, "prints four ledger tables and cross-checks them; split per table when next touched"
    ),
}

# Modules that may import a database driver although they live outside storage/.
DRIVER_IMPORTS_ALLOWED = {
    "demo/participant_ledger.py": "the demo participant is a fake external service with its "
    "own ledger; it is not Ledgerflow's journal and must not go through Ledgerflow's store",
    "demo/own_file.py": "the write transaction of the sample participants' own files, which "
    "are not Ledgerflow's journal and must not go through Ledgerflow's store",
    "participant/kit.py": "the participant kit keeps a participant's idempotency record in "
    "the participant's own database, in the service's transaction: never Ledgerflow's journal",
    "demo/reservations.py": "a participant's reservation book lives in the participant's "
    "own database file, not in Ledgerflow's journal, so it must not go through Ledgerflow's store",
}
DRIVERS = {"sqlite3", "psycopg", "psycopg2", "psycopg_pool", "asyncpg"}

# What the pure domain model may import: itself, errors, limits and side-effect-free stdlib.
MODEL_IMPORTS_ALLOWED = {
    "__future__",
    # A schedule's slots: cron expressions (a pure evaluator) and time zones (the tz database).
    "cronsim",
    "zoneinfo",
    "abc",
    "ast",  # parses the workflow's source to fingerprint its code, not its formatting
    "collections",
    "collections.abc",
    "dataclasses",
    "datetime",  # timedelta for backoffs; reading the clock is checked separately below
    "decimal",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "inspect",  # reads a declared function's source to fingerprint it
    "itertools",
    "json",
    "math",
    "operator",
    "re",
    "string",
    "textwrap",
    "types",
    "typing",
    "unicodedata",  # the naming rule normalises identifiers to NFC and reads character classes
    "ledgerflow.errors",
    "ledgerflow.limits",
}
CLOCK_READS = {"now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter"}
VAGUE_NAMES = {"utils", "util", "helpers", "helper", "common", "misc"}


def _functions(path: Path) -> dict[str, int]:
    """Qualified name -> length in lines (from ``def`` to the last line of the body)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                lengths[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text()), "")
    return lengths


def test_sources_are_found() -> None:
    """Goal: the ratchets below really look at the code (a wrong path would pass vacuously).

    Method: the source walk finds the package's core modules.
    """
    names = {relative(p) for p in sources()}
    assert {
        "errors/__init__.py",
        "model/machine.py",
        "storage/sqlite.py",
        "runtime/engine.py",
    } <= names


@pytest.mark.parametrize("path", sources(), ids=relative)
def test_no_module_is_too_long(path: Path) -> None:
    """Goal: one concept per module, a few hundred lines at most (docs/style.md point 3).

    Method: count the physical lines of the module.
    """
    lines = len(path.read_text().splitlines())
    assert lines <= MODULE_LINES_MAX, f"{relative(path)} has {lines} lines: split it by concept"


def test_no_function_is_too_long() -> None:
    """Goal: functions stay readable in one screen; known exceptions can only shrink.

    Method: measure every function and method with ``ast``; anything over the limit must be on
    the allow-list and within its ceiling; an allow-list entry that no longer exceeds the limit
    (or no longer exists) must be removed.
    """
    too_long: list[str] = []
    seen: dict[str, int] = {}
    for path in sources():
        for name, lines in _functions(path).items():
            key = f"{relative(path)}::{name}"
            seen[key] = lines
            allowed = LONG_FUNCTIONS.get(key)
            if lines > FUNCTION_LINES_MAX and (allowed is None or lines > allowed.lines_max):
                ceiling = allowed.lines_max if allowed else FUNCTION_LINES_MAX
                too_long.append(f"{key}: {lines} lines (limit {ceiling})")
    assert not too_long, "split these functions:\n" + "\n".join(too_long)
    stale = [k for k in LONG_FUNCTIONS if seen.get(k, 0) <= FUNCTION_LINES_MAX]
    assert not stale, f"now short enough (or gone), remove from LONG_FUNCTIONS: {stale}"
    assert all(entry.reason for entry in LONG_FUNCTIONS.values())


def test_database_drivers_are_imported_only_by_storage() -> None:
    """Goal: SQL in one place per backend: only storage/ talks to a database driver.

    Method: collect the imports of every module outside storage/; a driver import is allowed
    only for the modules listed, with their reason.
    """
    offenders = [
        f"{relative(path)} imports {sorted(drivers)}"
        for path in sources()
        if not relative(path).startswith("storage/")
        and relative(path) not in DRIVER_IMPORTS_ALLOWED
        and (drivers := {m for m in imported_modules(path) if m.split(".")[0] in DRIVERS})
    ]
    assert not offenders, offenders
    for allowed in DRIVER_IMPORTS_ALLOWED:
        assert (PACKAGE / allowed).exists(), f"remove {allowed} from DRIVER_IMPORTS_ALLOWED"


def test_model_is_pure() -> None:
    """Goal: model/ is the pure domain: no I/O, no clock, no SQL, no runtime (docs/style.md
    point 1).

    Method: every import of every model module is either another model module or on the
    allow-list (so socket, sqlite3, httpx, asyncio, os, time, random, logging, storage, runtime,
    cli and participant.remote are all refused); and no model code calls a clock reader such as
    ``datetime.now()`` or ``time.time()``.
    """
    problems: list[str] = []
    for path in sorted((PACKAGE / "model").rglob("*.py")):
        for module in sorted(imported_modules(path)):
            if module.startswith("ledgerflow.model") or module in MODEL_IMPORTS_ALLOWED:
                continue
            problems.append(f"model/{path.name} imports {module}")
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CLOCK_READS
            ):
                problems.append(f"model/{path.name}:{node.lineno} reads a clock")
    assert not problems, problems


def test_model_import_rule_would_catch_io() -> None:
    """Goal: the purity rule above is not vacuous.

    Method: none of the I/O modules named in the brief is on the model allow-list.
    """
    io_modules = {"socket", "sqlite3", "httpx", "asyncio", "asyncio.subprocess", "os", "time"}
    io_modules |= {"random", "logging", "subprocess", "pathlib", "threading", "urllib.request"}
    assert not io_modules & MODEL_IMPORTS_ALLOWED
    assert not any(
        m.startswith(("ledgerflow.storage", "ledgerflow.runtime")) for m in MODEL_IMPORTS_ALLOWED
    )


def test_no_vague_module_names() -> None:
    """Goal: name things by responsibility: no utils, helpers, common or misc modules.

    Method: look at every module and package name under src/ and tests/.
    """
    vague = [
        path.relative_to(ROOT).as_posix()
        for folder in (SRC, ROOT / "tests")
        for path in folder.rglob("*")
        if (path.stem if path.suffix == ".py" else path.name if path.is_dir() else "")
        in VAGUE_NAMES
    ]
    assert not vague, vague


def test_dialects_define_the_same_queries_and_migrations() -> None:
    """Goal: the same query names and migration numbers in every dialect (docs/style.md point 8).

    Method: for every dialect folder under storage/sql (sqlite and postgres; portable/ holds
    the queries they share and is no dialect), compare its named queries, the portable ones
    included, and migration numbers with sqlite's.
    """
    dialects = _dialects()
    assert "sqlite" in dialects
    reference = set(queries.load("sqlite"))
    numbers = [n for n, _, _ in queries.migrations("sqlite")]
    for dialect in dialects:
        assert set(queries.load(dialect)) == reference, dialect
        assert [n for n, _, _ in queries.migrations(dialect)] == numbers, dialect


def _dialects() -> list[str]:
    return sorted(p.name for p in SQL.iterdir() if p.is_dir() and p.name != queries.PORTABLE)


def _folder_blocks(folder: str) -> dict[str, str]:
    """Name -> statement of every block in the .sql files of one folder under storage/sql."""
    blocks: dict[str, str] = {}
    for path in sorted((SQL / folder).glob("*.sql")):
        blocks |= queries.parse_blocks(path.read_text())
    return blocks


def test_a_portable_query_is_written_in_no_dialect_folder() -> None:
    """Goal: a query written once in storage/sql/portable/ is not also written in a dialect's
    folder, where one copy could drift from the other (the loader refuses such a pair too).

    Method: read the blocks of portable/ and of each dialect folder: no name in both.
    """
    portable = _folder_blocks(queries.PORTABLE)
    assert portable
    for dialect in _dialects():
        assert not sorted(portable.keys() & _folder_blocks(dialect).keys()), dialect


def test_a_query_written_alike_in_every_dialect_is_written_once() -> None:
    """Goal: no query is copied into each dialect's folder to the letter: one written the same
    in all of them lives once, in portable/, so that a change to it is made once.

    Method: the names whose statements (comments aside, as the loader reads them) are the same
    in every dialect folder; there must be none. Move any found to the portable/ file of the
    same name, comments and all.
    """
    folders = [_folder_blocks(dialect) for dialect in _dialects()]
    alike = sorted(
        name
        for name, statement in folders[0].items()
        if all(other.get(name) == statement for other in folders[1:])
    )
    assert not alike, alike


def test_sql_lives_in_sql_files() -> None:
    """Goal: SQL in one place per backend: Python modules do not build DML statements.

    Method: outside the two dialect modules (storage/sqlite.py and storage/postgres.py keep the
    migration runner's own bookkeeping statements, which run before any named query can), no
    string literal in storage/ is an INSERT, UPDATE, DELETE or SELECT statement.
    """
    statement = re.compile(
        r"^\s*(INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|SELECT\s.*\bFROM)\b"
    )
    found: list[str] = []
    for path in sorted((PACKAGE / "storage").glob("*.py")):
        if path.name in ("sqlite.py", "postgres.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if statement.match(node.value):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found


def test_the_changelog_has_an_unreleased_section() -> None:
    """Goal: CHANGELOG.md exists in Keep a Changelog's form, with the "Unreleased" section every
    user-visible change adds its line to, and says so (issue 24).

    Method: read it: a "## [Unreleased]" heading before any released version's, holding at
    least one "### " group with a "- " line; the header names the rule.
    """
    path = ROOT / "CHANGELOG.md"
    assert path.is_file(), "CHANGELOG.md is missing"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    assert "Keep a Changelog" in text.split("## ", 1)[0]
    assert "Every user-visible change adds a line here" in text.split("## ", 1)[0]
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert versions[:1] == ["Unreleased"], versions
    unreleased = re.split(r"^## \[", text, flags=re.M)[1]
    assert re.search(r"^### (Added|Changed|Deprecated|Removed|Fixed|Security)\n", unreleased, re.M)
    assert re.search(r"^- ", unreleased, re.M)
