"""What a new user meets first at the command line (issue 15), through the real entry point.

Each test reproduces what the issue saw happen (a traceback, a leaked password, a journal
created by a typo, a blanked column...) and checks the clear answer that replaced it. Tests
that take ``db`` run on a SQLite file and on PostgreSQL through a URL that carries a planted
password; ``conftest.py`` fails any test after which that password was printed or logged.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click
import pytest

import planted
from damaged_files import damage_instances_table
from ledger_records import new
from ledgerflow.cli.worker import worker
from ledgerflow.limits import JSON_DEPTH_MAX
from ledgerflow.storage import migrations, open_store
from ledgerflow.storage.sqlite import APPLICATION_ID
from ledgerflow.storage.sqlite import _statements as statements
from postgres_schema import postgres_url

Entry = Callable[..., tuple[int, str, str]]
QUICK_SOURCE = """
import ledgerflow as lf

registry = lf.Registry()


@registry.workflow(name="order", version=1)
async def order(ctx: lf.WorkflowContext, order: dict) -> dict:
    return {"items": len(order.get("items", []))}
"""
# Output the terminal would act on: ESC starts every escape sequence, U+202E reorders text.
RAW = ("\x1b", "\u202e", "\x07")


@pytest.fixture
def code_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding quick2.py (a registry), as the working folder."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "quick2.py").write_text(QUICK_SOURCE, encoding="utf-8")
    (folder / "raises.py").write_text("raise RuntimeError('bad import')\n", encoding="utf-8")
    monkeypatch.chdir(folder)
    yield folder
    for name in ("quick2", "raises"):
        sys.modules.pop(name, None)


def _one_error_line(err: str, code: str) -> str:
    """The error output is exactly one line, with this code and no traceback."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: [{code}]"), err
    return lines[0]


def _started(entry: Entry, db: str, key: str, *extra: str) -> dict[str, object]:
    code, out, err = entry(
        *("start", "quick2:registry", "order", "--key", key, "--db", db, "--json", *extra)
    )
    assert code == 0, err
    document: dict[str, object] = json.loads(out)
    return document


# -- item 2: managed PostgreSQL, standard URLs ---------------------------------------------------


@pytest.mark.postgres
def test_libpq_urls_work_and_a_missing_database_is_named_at_once(
    entry: Entry, code_folder: Path, request: pytest.FixtureRequest
) -> None:
    """Goal: a managed PostgreSQL URL works from the command line (the bug: sslmode,
    application_name and postgresql+psycopg:// were refused), and a database that does not
    exist is one line naming it, at once (the bug: 10 s of silence, then "pool initialization
    incomplete" after four pool warnings).

    Method: migrate and list through a +psycopg URL with sslmode, application_name and
    connect_timeout; then list on a database that does not exist: LF205 in one line naming
    it, within 3 s.
    """
    base = planted.url(postgres_url(request.node.name))
    url = base.replace("postgresql://", "postgresql+psycopg://", 1)
    url += "&sslmode=disable&application_name=lf-cli&connect_timeout=3"
    code, _, err = entry("migrate", "--db", url)
    assert code == 0, err
    code, out, err = entry("list", "--db", url, "--json")
    assert code == 0, err
    assert json.loads(out) == {"items": [], "next_cursor": None}
    parts = urlsplit(base)
    missing = urlunsplit(parts._replace(path="/lf_no_such_database"))
    began = time.monotonic()
    code, out, err = entry("list", "--db", missing)
    assert time.monotonic() - began < 3
    assert code == 1
    assert "no database 'lf_no_such_database'" in _one_error_line(err, "LF205")


# -- item 3: secrets -----------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_password_in_the_url_is_never_printed(
    entry: Entry,
    code_folder: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Goal: a password in --db appears in no error and no log line (the bug: the LF201 error
    and the worker's first log line printed it).

    Method: with a planted password: list on a port nothing listens on (LF201, one line),
    a URL with an unknown option (LF100), and a worker run until idle, whose first line names
    the store; none holds the password, and the URL is still shown with it masked.
    """
    base = planted.url(postgres_url(request.node.name))
    host = urlsplit(base).hostname
    refused = urlunsplit(urlsplit(base)._replace(netloc=f"postgres:{planted.PASSWORD}@{host}:1"))
    code, _, err = entry("list", "--db", refused)
    assert code == 1
    line = _one_error_line(err, "LF201")
    assert "Connection refused" in line
    assert f"postgres:***@{host}:1" in line
    code, _, err = entry("list", "--db", base + "&sslmod=require")
    assert code == 1
    assert "sslmod" in _one_error_line(err, "LF100")
    code, _, err = entry("worker", "quick2:registry", "--db", base, "--until-idle")
    assert code == 0, err
    # The worker's first line is a log record: on stderr in a process, captured here.
    logged = caplog.text
    assert "running on postgresql://postgres:***@" in logged
    for text in (err, logged, *planted.printed):
        assert planted.PASSWORD not in text


# -- item 4: read-only commands, explicit migrations ---------------------------------------------


def test_read_only_commands_never_create_a_journal(
    entry: Entry, code_folder: Path, tmp_path: Path
) -> None:
    """Goal: a typo in --db is an error naming the path, never a new empty journal (the bug:
    `ledgerflow list --db sqlite:///ordrs.db` created ordrs.db and said "no instances").

    Method: every command that only reads or acts on existing instances, on a file that does
    not exist: exit 1, one line LF205 naming the path; the file still does not exist.
    """
    typo = tmp_path / "ordrs.db"
    db = f"sqlite:///{typo}"
    commands = [
        ("list",),
        ("show", "wf_x"),
        ("result", "wf_x"),
        ("audit",),
        ("attention",),
        ("attention", "--scan"),
        ("reconcile", "--runs"),
        ("cancel", "wf_x", "--reason", "typo"),
        ("signal", "wf_x", "go", "--event-id", "e1"),
        ("repair", "resume", "wf_x", "--reason", "r"),
    ]
    for command in commands:
        code, out, err = entry(*command, "--db", db)
        assert code == 1, (command, out, err)
        assert str(typo) in _one_error_line(err, "LF205"), command
        assert not typo.exists(), command


def test_migrate_dry_run_then_migrate(entry: Entry, db: str) -> None:
    """Goal: schema changes can be one explicit, reviewed step: `migrate --dry-run` says what
    would be applied and changes nothing; `migrate` applies it; again, it has nothing to do.

    Method: on a journal that does not exist yet: dry run (JSON) lists every migration and
    list still finds no journal; migrate applies them; a second migrate applies none; list
    works.
    """
    every = [m.label for m in migrations.known("sqlite")]
    code, out, err = entry("migrate", "--db", db, "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["would_apply"] == every
    assert plan["version_before"] == 0
    code, _, _ = entry("list", "--db", db)
    assert code == 1
    code, out, err = entry("migrate", "--db", db)
    assert code == 0, err
    assert f"applied {', '.join(every)}" in out
    code, out, err = entry("migrate", "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out)["applied"] == []
    assert "up to date" in entry("migrate", "--db", db, "--dry-run")[1]
    assert entry("list", "--db", db, "--json")[0] == 0


def _older_journal(path: Path) -> migrations.Migration:
    """A journal as the Ledgerflow before the newest migration left it; that migration."""
    *older, newest = migrations.known("sqlite")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(
            "CREATE TABLE lf_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "checksum TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        for migration in older:
            for statement in statements(migration.text):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO lf_schema_migrations VALUES (?, ?, ?, 0)",
                (migration.number, migration.name, migration.checksum),
            )
    finally:
        conn.close()
    return newest


def test_an_older_schema_is_migrated_only_where_allowed(
    entry: Entry, code_folder: Path, tmp_path: Path
) -> None:
    """Goal: read-only commands and ?migrate=false refuse a journal that needs migrating, with
    the command that fixes it, and change nothing; start (like a worker) still migrates by
    default.

    Method: a journal made by the migrations before the newest; list: LF204 naming
    `ledgerflow migrate`; start with ?migrate=false: LF204; the file is unchanged; start:
    migrates and starts; list then works and the journal is at the newest version.
    """
    path = tmp_path / "old.db"
    db = f"sqlite:///{path}"
    newest = _older_journal(path)
    before = path.read_bytes()
    code, _, err = entry("list", "--db", db)
    assert code == 1
    assert "ledgerflow migrate" in _one_error_line(err, "LF204")
    code, _, err = entry(
        "start", "quick2:registry", "order", "--key", "k", "--db", db + "?migrate=false"
    )
    assert code == 1
    assert f"needs version {newest.number}" in _one_error_line(err, "LF204")
    assert path.read_bytes() == before
    assert _started(entry, db, "k")["created"] is True
    code, out, err = entry("list", "--db", db, "--json")
    assert code == 0, err
    assert len(json.loads(out)["items"]) == 1
    assert migrations.known("sqlite")[-1] == newest


# -- item 5: tracebacks --------------------------------------------------------------------------


def test_module_targets_never_end_in_a_traceback(entry: Entry, code_folder: Path, db: str) -> None:
    """Goal: MODULE:OBJECT as a file path works, and every way it can be wrong is one line
    (the bug: `start ./quick2.py:registry` ended in a TypeError about 'package').

    Method: start through ./quick2.py:registry (works); a missing file, a module that raises
    on import, a missing attribute, a non-registry: exit 2, one line LF104 naming the cause.
    """
    started = _started(entry, db, "k-path").get("workflow")
    assert started == "order"
    for target, words in (
        ("./missing.py:registry", "not a Python file"),
        ("raises:registry", "raised RuntimeError: bad import"),
        ("quick2:nope", "has no attribute 'nope'"),
        ("quick2:lf", "is a module, not a ledgerflow.Registry"),
        ("quick2", "expected MODULE:OBJECT"),
    ):
        code, _, err = entry("start", target, "order", "--key", "k", "--db", db)
        assert code == 2, (target, err)
        assert words in _one_error_line(err, "LF104"), target


def test_inputs_from_files_and_stdin_and_bounded_nesting(
    entry: Entry, code_folder: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: large inputs can be given (the bug: nothing over ~128 KB could be passed), and
    deeply nested ones are refused clearly (the bug: RecursionError from --input and from
    signal --payload).

    Method: --input @file with 300 KB of items, and --input - from stdin: both start; JSON
    nested 100 000 deep in --input and in signal --payload: exit 2, one line LF104 naming the
    option and the bound.
    """
    items = {"items": [{"sku": f"sku-{n:06d}", "qty": n} for n in range(10_000)]}
    big = code_folder / "order.json"
    big.write_text(json.dumps(items), encoding="utf-8")
    assert big.stat().st_size > 300_000
    assert _started(entry, db, "k-file", "--input", f"@{big}")["created"] is True
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"items": [1, 2]})))
    started = _started(entry, db, "k-stdin", "--input", "-")
    deep = "[" * 100_000 + "]" * 100_000
    code, _, err = entry(
        "start", "quick2:registry", "order", "--key", "k", "--db", db, "--input", deep
    )
    assert code == 2
    line = _one_error_line(err, "LF104")
    assert "--input" in line
    assert f"at most {JSON_DEPTH_MAX}" in line
    code, _, err = entry(
        "signal",
        str(started["instance_id"]),
        "go",
        "--event-id",
        "e",
        "--payload",
        deep,
        "--db",
        db,
    )
    assert code == 2
    assert "--payload" in _one_error_line(err, "LF104")


def test_a_malformed_fault_plan_is_one_line(
    entry: Entry, code_folder: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: LEDGERFLOW_FAULTS that is not a fault plan is a clear configuration error (the
    bug: a JSONDecodeError traceback). Method: '{bad' and '[1]': exit 1, one line LF100."""
    for plan in ("{bad", "[1]"):
        monkeypatch.setenv("LEDGERFLOW_FAULTS", plan)
        code, _, err = entry("worker", "quick2:registry", "--db", db, "--until-idle")
        assert code == 1
        assert "LEDGERFLOW_FAULTS is not a fault plan" in _one_error_line(err, "LF100")


# -- item 6: business keys and tenants -----------------------------------------------------------


def test_keys_and_tenants_follow_one_rule(entry: Entry, code_folder: Path, db: str) -> None:
    """Goal: "é" as NFC and as NFD is one business key; control characters, U+202E and
    leading spaces are refused; --tenant '' is refused as it is over HTTP (the bug: it
    silently became 'default').

    Method: start "café-1" in NFC then NFD: the same instance, "already existed"; each bad
    key and the empty tenant (start and list): exit 1, one line LF110 saying what is wrong.
    """
    first = _started(entry, db, unicodedata.normalize("NFC", "café-1"))
    again = _started(entry, db, unicodedata.normalize("NFD", "café-1"))
    assert again["instance_id"] == first["instance_id"]
    assert again["created"] is False
    for key, words in (
        ("line\nbreak", "control or bidirectional character (U+000A"),
        ("red\x1b[31m", "U+001B"),
        ("ab\u202ecd", "U+202E"),
        (" leading", "whitespace"),
    ):
        code, _, err = entry("start", "quick2:registry", "order", "--key", key, "--db", db)
        assert code == 1, key
        assert words in _one_error_line(err, "LF110"), key
        assert not any(raw in err for raw in RAW)
    code, _, err = entry(
        "start", "quick2:registry", "order", "--key", "k", "--db", db, "--tenant", ""
    )
    assert "tenant must not be empty" in _one_error_line(err, "LF110")
    code, _, err = entry("list", "--db", db, "--tenant", "")
    assert code == 1
    assert "tenant must not be empty" in _one_error_line(err, "LF110")


def test_stored_escape_sequences_are_shown_inert(entry: Entry, tmp_path: Path) -> None:
    """Goal: a key or reason holding terminal escapes (written before keys were checked, or by
    anything else) is never written raw to the operator's terminal by list or show.

    Method: store an instance whose key holds ESC sequences, a BEL and U+202E, through the
    store (as an older version could); list and show print none of those characters raw, and
    show each as a visible escape.
    """
    db = f"sqlite:///{tmp_path}/journal.db"
    store = open_store(db)
    raw = new("k\x1b[2J\x1b[31mred\x07\u202eevil", tenant="default")
    store.start_instance(
        dataclasses.replace(raw, instance_id="wf_raw", input='{"note": "\\u001b[31m"}'),
        now=1.0,
    )
    store.close()
    for command in (
        ("list",),
        ("show", "wf_raw"),
        ("list", "--json"),
        ("show", "wf_raw", "--json"),
    ):
        code, out, err = entry(*command, "--db", db)
        assert code == 0, err
        assert not any(raw in out for raw in RAW), command
    listed = entry("list", "--db", db)[1]
    assert "k\\x1b[2J\\x1b[31mred\\x07\\u202eevil" in listed


# -- item 7: smaller things ----------------------------------------------------------------------


def test_memory_and_a_zero_poll_are_refused(entry: Entry, code_folder: Path) -> None:
    """Goal: `--db :memory:` (a journal that vanishes with the process) and `--poll-seconds 0`
    (a busy loop) are refused (the bug: both were accepted).

    Method: start on :memory: (LF100, one line, no file made); worker with --poll-seconds 0
    (exit 2, LF104 naming the option).
    """
    code, _, err = entry("start", "quick2:registry", "order", "--key", "k", "--db", ":memory:")
    assert code == 1
    assert "outlive the process" in _one_error_line(err, "LF100")
    assert not (code_folder / ":memory:").exists()
    code, _, err = entry(
        "worker", "quick2:registry", "--db", "sqlite:///w.db", "--poll-seconds", "0"
    )
    assert code == 2
    assert "--poll-seconds" in _one_error_line(err, "LF104")


def test_every_worker_option_says_what_it_does() -> None:
    """Goal: `ledgerflow worker --help` explains every option (the bug: several had no help).
    Method: every option of the worker command has help text."""
    options = [p for p in worker.params if isinstance(p, click.Option)]
    assert options
    assert all((option.help or "").strip() for option in options), [
        option.name for option in options if not option.help
    ]


def test_result_json_reports_errors_as_json(entry: Entry, code_folder: Path, db: str) -> None:
    """Goal: `result --json` answers in JSON even when it fails (the bug: errors as text), and
    a result that is not ready says a worker must run.

    Method: an unknown id and an instance no worker has run, with --json: exit 1, stdout one
    JSON error document (LF400, LF401 naming the worker), stderr empty.
    """
    started = _started(entry, db, "k-result")
    code, out, err = entry("result", "wf_nope", "--db", db, "--json")
    assert (code, err) == (1, "")
    assert json.loads(out) == {
        "error": "instance_not_found",
        "code": "LF400",
        "message": "No workflow instance has this id. (instance_id=wf_nope)",
    }
    code, out, err = entry("result", str(started["instance_id"]), "--db", db, "--json")
    assert (code, err) == (1, "")
    document = json.loads(out)
    assert document["code"] == "LF401"
    assert "worker" in document["message"]


def test_narrow_terminals_keep_every_column(
    entry: Entry, code_folder: Path, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: a narrow terminal never blanks a column (the bug: `COLUMNS=70 ledgerflow list`
    showed "…" for the workflow, the reason, the owner...).

    Method: one instance with a long key; list at 70 columns shows each column's name and its
    whole value (folded lines joined back); at 200 columns it is still a table.
    """
    key = "a-very-long-business-key-that-goes-on-and-on-0123456789"
    instance_id = _started(entry, db, key)["instance_id"]
    monkeypatch.setenv("COLUMNS", "70")
    code, out, err = entry("list", "--db", db)
    assert code == 0, err
    assert all(len(line) <= 70 for line in out.splitlines())
    joined = "".join(out.split())
    for value in (str(instance_id), "order@1", key, "RUNNING", "businesskey", "updated"):
        assert value in joined, value
    monkeypatch.setenv("COLUMNS", "200")
    assert "┃ business key" in entry("list", "--db", db)[1]


def test_missing_extras_are_named(
    entry: Entry, code_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: the server libraries are extras, and a command that needs a missing one says
    which extra to install (instead of an ImportError).

    Method: hide starlette and psycopg from imports; serve and demo: LF105 naming
    ledgerflow[http]; a PostgreSQL URL: LF105 naming ledgerflow[postgres]; a SQLite store
    still works.
    """
    for name in ("starlette", "uvicorn", "psycopg", "psycopg_pool"):
        monkeypatch.setitem(sys.modules, name, None)
    for command in (("serve", "--db", "sqlite:///s.db"), ("demo",)):
        code, _, err = entry(*command)
        assert code == 1
        assert "pip install 'ledgerflow[http]'" in _one_error_line(err, "LF105")
    code, _, err = entry("list", "--db", "postgresql://u@127.0.0.1/db")
    assert "pip install 'ledgerflow[postgres]'" in _one_error_line(err, "LF105")
    assert entry("migrate", "--db", "sqlite:///s.db")[0] == 0


# -- item 8: damaged journals, one-line errors ---------------------------------------------------


def test_a_damaged_or_empty_journal_is_one_line(
    entry: Entry, code_folder: Path, tmp_path: Path
) -> None:
    """Goal: a damaged page is LF202 in one line for every read (the bug: a 44-line
    traceback from list, show and attention --scan), and a zero-byte file is refused, not set
    up as a fresh ledger.

    Method: a journal with 50 instances and its instances table's root page overwritten:
    list, show, attention --scan: exit 1, one line LF202. An empty file: start and list are
    LF202, and the file stays empty.
    """
    path = tmp_path / "damaged.db"
    db = f"sqlite:///{path}"
    ids = [str(_started(entry, db, f"k-{n}")["instance_id"]) for n in range(50)]
    damage_instances_table(path)
    for command in (("list",), ("show", ids[0]), ("attention", "--scan")):
        code, _, err = entry(*command, "--db", db)
        assert code == 1, command
        assert "malformed" in _one_error_line(err, "LF202"), command
    empty = tmp_path / "empty.db"
    empty.touch()
    for command in (("list",), ("start", "quick2:registry", "order", "--key", "k")):
        code, _, err = entry(*command, "--db", f"sqlite:///{empty}")
        assert code == 1
        assert "empty file" in _one_error_line(err, "LF202")
    assert empty.stat().st_size == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("list", "--bogus"), "No such option '--bogus'"),
        (("show",), "Missing argument 'ID'"),
        (("list", "--db", "x.db", "--limit", "many"), "'many' is not a valid integer"),
        (("lsit",), "No such command 'lsit'"),
        (("repair", "resume", "wf_x", "--db", "x.db"), "Missing option '--reason'"),
    ],
)
def test_usage_errors_are_one_line_with_a_code(
    entry: Entry, args: tuple[str, ...], words: str
) -> None:
    """Goal: a command line click cannot parse is one line with a code, like every other
    error (the bug: three-line click messages). Method: each: exit 2, one line LF104."""
    code, out, err = entry(*args)
    assert code == 2
    assert out == ""
    assert words in _one_error_line(err, "LF104")


# -- item 9: one shape per kind of output --------------------------------------------------------


def test_every_listing_has_one_shape(entry: Entry, code_folder: Path, db: str) -> None:
    """Goal: every --json listing is one object with its items (the bug: list printed an
    array, attention an object with items, audit JSON lines).

    Method: list, attention, audit and reconcile --runs with --json on a journal with one
    instance: each a JSON object whose "items" is a list; list's item decodes the input.
    """
    _started(entry, db, "k-shape", "--input", '{"items": [1]}')
    for command in ("list", "attention", "audit", ("reconcile", "--runs")):
        words = command if isinstance(command, tuple) else (command,)
        code, out, err = entry(*words, "--db", db, "--json")
        assert code == 0, err
        document = json.loads(out)
        assert isinstance(document, dict), words
        assert isinstance(document["items"], list), words
    listed = json.loads(entry("list", "--db", db, "--json")[1])["items"]
    assert listed[0]["input"] == {"items": [1]}
