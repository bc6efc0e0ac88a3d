"""The rolling-deploy tests' cast: one participant service (``bank``, lookup only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_code import PARTICIPANTS

from processes import Service, running_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", PARTICIPANTS) as s:
        yield s
