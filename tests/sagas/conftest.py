"""The saga tests' cast: trip participants and order participants, each with its promises."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processes import Service, Workers, running_service

# Each participant's promises (see saga_workflows): both ways of settling an UNKNOWN occur.
PARTICIPANTS = (
    "flight:lookup",
    "hotel:dedupe",
    "car:dedupe+lookup",
    "inventory:lookup",
    "payment:dedupe",
    "shipping:dedupe+lookup",
    "email:dedupe",
)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", PARTICIPANTS) as s:
        yield s


@pytest.fixture
def workers(tmp_path: Path, service: Service) -> Workers:
    return Workers(
        db_url=f"sqlite:///{tmp_path}/journal.db",
        service=service,
        log=tmp_path / "workers.log",
        target="saga_workflows:registry",
        path=Path(__file__).parent,
    )
