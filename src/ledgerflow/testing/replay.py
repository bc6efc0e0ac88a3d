"""Replaying recorded histories in a user's own tests (public through ``ledgerflow.testing``).

``ledgerflow export ID > tests/histories/ID.json`` keeps a history; a test replays the folder
against the code as it is now, and fails on the first change that would not resume those runs::

    from ledgerflow.testing import replay_histories

    def test_the_code_still_replays_our_histories() -> None:
        verdicts = replay_histories(registry, "tests/histories")
        assert all(v.compatible for v in verdicts), [v.reason for v in verdicts]

Nothing is dispatched and nothing is written: the journal answers every step and effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry
from ledgerflow.operators.upgrades import replay_folder
from ledgerflow.runtime.history import history_from_document, journal_of, read_history
from ledgerflow.runtime.replay import ReplayVerdict, replay_against


def replay_history(
    registry: Registry, history: Mapping[str, Any] | str | Path, *, codec: Codec = JSON
) -> ReplayVerdict:
    """Replay one exported history (its document, or the path of its file)."""
    if isinstance(history, Mapping):
        detail = history_from_document(history)
    else:
        detail = read_history(history)
    return asyncio.run(replay_against(registry, detail.instance, journal_of(detail), codec=codec))


def replay_histories(
    registry: Registry, directory: str | Path, *, codec: Codec = JSON
) -> list[ReplayVerdict]:
    """Replay every ``*.json`` history of a folder, in file-name order."""
    return replay_folder(registry, directory, codec=codec)
