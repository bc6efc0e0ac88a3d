"""The crash-point tests' cast: inventory (lookup), payment (dedupe), legacy (neither)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_workflows import PARTICIPANTS

from processes import Service, Workers, running_service

HERE = Path(__file__).parent


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", PARTICIPANTS) as s:
        yield s


@pytest.fixture
def workers(tmp_path: Path, service: Service) -> Workers:
    return Workers.in_folder(tmp_path, service, target="fault_workflows:registry", path=HERE)
