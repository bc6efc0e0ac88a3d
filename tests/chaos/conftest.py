"""Fixtures of the chaos tests; the machinery itself is in ``chaos_harness``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import chaos_harness
import pytest

from processes import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with chaos_harness.chaos_service(tmp_path / "participants") as s:
        yield s


@pytest.fixture
def chaos() -> ModuleType:
    """The fleet, driver and verdict helpers, for the tests."""
    return chaos_harness
