"""The crash-point tests' cast: inventory (lookup), payment (dedupe), legacy (neither)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processes import Service, Workers, running_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    folder = tmp_path / "participants"
    folder.mkdir()
    with running_service(folder, ["inventory:lookup", "payment:dedupe", "legacy:none"]) as s:
        yield s


@pytest.fixture
def workers(tmp_path: Path, service: Service) -> Workers:
    return Workers(
        db_url=f"sqlite:///{tmp_path}/journal.db",
        service=service,
        log=tmp_path / "workers.log",
        target="fault_workflows:registry",
        path=Path(__file__).parent,
    )
