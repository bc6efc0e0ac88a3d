"""What the operators' tests share: the repair tests' authority policy, and their
participants' switches put back after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import repair_workflows

from ledgerflow.operators.authority import Authority


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    """The policy of ``repair_workflows.POLICY``: alice and bob operate, carol views."""
    path = tmp_path / "authority.toml"
    path.write_text(repair_workflows.POLICY)
    return Authority.from_file(path)


@pytest.fixture
def repair_faults() -> Iterator[None]:
    """The repair participants start with no fault switched on and no applications, and end
    so."""
    repair_workflows.reset()
    yield
    repair_workflows.reset()
