"""Shared test set-up: this folder is on sys.path, so test folders import ``processes``,
``postgres_schema`` and ``conditions``; ``journal_url`` runs a test on each backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from postgres_schema import postgres_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh journal: a SQLite file, and a fresh PostgreSQL schema when one is configured."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return postgres_url(request.node.nodeid)
