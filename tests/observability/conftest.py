"""The observability tests' cast (``observed_workflows.PARTICIPANTS``) and worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from observed_workflows import PARTICIPANTS

from processes import Service, Workers, running_service

HERE = Path(__file__).parent


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", PARTICIPANTS) as s:
        yield s


@pytest.fixture
def workers(tmp_path: Path, service: Service) -> Workers:
    return Workers.in_folder(tmp_path, service, target="observed_workflows:registry", path=HERE)
