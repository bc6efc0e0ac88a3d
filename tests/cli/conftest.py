"""The CLI tests' shared set-up: the store each test runs on, the real entry point, and the
check that no planted password is ever printed or logged.

``db`` is a SQLite file, or (marked ``postgres``) a fresh PostgreSQL schema reached through a
URL that carries a planted password; every test that takes it runs on both. ``entry`` runs the
real ``main()`` (its one-line errors and exit codes) and records what it printed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest

import planted
from ledgerflow.cli.main import main

Entry = Callable[..., tuple[int, str, str]]


@pytest.fixture
def db(journal_url: str) -> str:
    """The test's journal (``journal_url``), its PostgreSQL URL carrying a planted password."""
    return journal_url if journal_url.startswith("sqlite:") else planted.url(journal_url)


@pytest.fixture(autouse=True)
def no_planted_password_printed(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """After each test: the planted password is in nothing printed, captured or logged."""
    planted.printed.clear()
    yield
    out, err = capsys.readouterr()
    planted.record(out, err, caplog.text)
    assert planted.leaks() == [], "a planted password was printed or logged"


@pytest.fixture
def entry(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Entry:
    """Run the real entry point (its error mapping included); get exit code, stdout, stderr."""
    for name in ("LEDGERFLOW_OPERATOR", "LEDGERFLOW_AUTHORITY", "LEDGERFLOW_DB", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["ledgerflow", *args])
        code = 0
        try:
            main()
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        planted.record(captured.out, captured.err)
        return code, captured.out, captured.err

    return run
