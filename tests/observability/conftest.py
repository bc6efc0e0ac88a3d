"""The observability tests' shared scripted run (see ``scripted_run``), once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scripted_run import ScriptedRun, scripted_run


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedRun]:
    yield from scripted_run(tmp_path_factory)
