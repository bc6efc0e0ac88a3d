"""What the command line tells a newcomer in their first hour (issue 24): where the journal's
URL can come from, how to run a worker, through the real entry point on a real SQLite file.

``entry`` (conftest) clears LEDGERFLOW_DB and the other variables before each test."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ledgerflow as lf
from ledgerflow.errors import ResultTimeoutError

Entry = Callable[..., tuple[int, str, str]]
SOURCE = """
import ledgerflow as lf
from ledgerflow.errors import ResultTimeoutError

registry = lf.Registry()


@registry.workflow(name="order", version=1)
async def order(ctx: lf.WorkflowContext, order: dict) -> dict:
    return order
"""


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding first_hour.py (a registry), as the working folder."""
    (tmp_path / "first_hour.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("first_hour", None)


@pytest.mark.parametrize(
    "command", [("list",), ("show", "wf_x"), ("result", "wf_x"), ("repair", "resume", "wf_x")]
)
def test_a_missing_db_names_ledgerflow_db(entry: Entry, command: tuple[str, ...]) -> None:
    """Goal: a command that needs a journal and got none says both ways to give it, --db and
    LEDGERFLOW_DB (issue 24: "Missing option '--db'" alone). Method: run each without either:
    exit 2, one line, LF104, naming LEDGERFLOW_DB."""
    extra = ("--reason", "r") if command[0] == "repair" else ()
    code, _, err = entry(*command, *extra)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("error: [LF104] Missing option '--db'."), line
    assert "or set LEDGERFLOW_DB" in line


def test_ledgerflow_db_is_read_where_db_is_missing(
    entry: Entry, code: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: LEDGERFLOW_DB does what the message says. Method: start with --db, then list
    with LEDGERFLOW_DB set and no --db: the instance is listed."""
    db = f"sqlite:///{code / 'orders.db'}"
    assert entry("start", "first_hour:registry", "order", "--key", "k1", "--db", db)[0] == 0
    monkeypatch.setenv("LEDGERFLOW_DB", db)
    status, out, err = entry("list")
    assert status == 0, err
    assert "k1" in out


def test_a_result_with_no_worker_says_to_run_ledgerflow_worker(entry: Entry, code: Path) -> None:
    """Goal: LF401 tells a person at the command line to run `ledgerflow worker`, not Python
    they cannot type there (issue 24: asyncio.create_task(engine.worker().run())). Method:
    start an instance (nothing runs it); `result` and `start --wait`: exit 1, LF401 with the
    command; no asyncio."""
    db = f"sqlite:///{code / 'orders.db'}"
    started = entry("start", "first_hour:registry", "order", "--key", "k1", "--db", db, "--json")
    assert started[0] == 0, started[2]
    instance_id = lf.SyncEngine(db, lf.Registry()).list()[0].instance_id
    waits = [
        ("result", instance_id, "--db", db),
        ("start", "first_hour:registry", "order", "--key", "k2", "--db", db, "--wait", "0.1"),
    ]
    for command in waits:
        status, _, err = entry(*command)
        assert status == 1, command
        line = err.strip().splitlines()[-1]
        assert line.startswith("error: [LF401] instance is still RUNNING"), line
        assert "run one with `ledgerflow worker MODULE:REGISTRY --db URL`" in line
        assert "asyncio" not in line


def test_a_sync_engine_does_not_offer_a_worker_it_cannot_run(tmp_path: Path) -> None:
    """Goal: a SyncEngine (which drives nothing) says to run a worker elsewhere, never
    ``engine.worker()`` that it does not have. Method: start, then result with timeout 0."""
    registry = lf.Registry()

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, value: int) -> int:
        return value

    with lf.SyncEngine(f"sqlite:///{tmp_path / 'j.db'}", registry) as engine:
        started = engine.start("order", key="k", input=1)
        with pytest.raises(ResultTimeoutError) as waited:
            engine.result(started.instance_id, timeout=0)
    assert "a SyncEngine drives nothing" in waited.value.message
    assert "engine.worker()" not in waited.value.message
