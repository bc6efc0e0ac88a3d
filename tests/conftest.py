"""Shared test set-up: this folder is on sys.path, so test folders import ``processes``,
``postgres_schema`` and ``conditions``; ``journal_url`` runs a test on each backend."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from postgres_schema import postgres_url

if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist hands its workers the controller's terminal size as COLUMNS and LINES; the CLI's
    # tables read COLUMNS as the width a person asked for, so a test run in a worker would
    # fold tables that a serial run prints whole. Tests that want a width set it themselves.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that spawn, SIGKILL or restart processes (marked ``slow``) share one xdist group:
    they run one after another on one worker, so two of them never compete for the machine's
    cores and time out, while the in-process tests spread over the other workers. A slow test
    that only simulates in its own process (marked ``simulated``: the fault explorer) spreads
    too."""
    for item in items:
        spawns = item.get_closest_marker("simulated") is None
        if item.get_closest_marker("slow") is not None and spawns:
            item.add_marker(pytest.mark.xdist_group("processes"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``exclusive`` restarts a service the others share: beside them (more
    than one xdist worker) it would pull the server from under them, so it refuses to run."""
    # An xdist worker knows how many workers there are; a serial run has no workerinput.
    worker: dict[str, int] = getattr(item.config, "workerinput", {})
    if worker.get("workercount", 1) > 1 and item.get_closest_marker("exclusive") is not None:
        pytest.fail(
            "this test restarts a service the other tests share (marked exclusive): run it "
            "on its own, as bash scripts/test does after the parallel run (pytest -m exclusive)"
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh journal: a SQLite file, and a fresh PostgreSQL schema when one is configured."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return postgres_url(request.node.nodeid)
