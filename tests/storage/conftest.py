"""The storage tests' store: a fresh, empty journal of each backend (``journal_url``), so that
one suite is the contract for both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store


@pytest.fixture
def store(journal_url: str) -> Iterator[Store]:
    """An open store on a new journal, closed after the test."""
    opened = open_store(journal_url)
    try:
        yield opened
    finally:
        opened.close()
