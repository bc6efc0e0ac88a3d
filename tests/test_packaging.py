"""Building the package: its metadata says what it should, and the build says nothing alarming.

``pip install`` printed setuptools' "``project.license`` as a TOML table is deprecated"
banner three times (issue 24): the licence is now the SPDX expression string of PEP 639,
which setuptools reads from version 77 on, so the build requires that version.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_SECONDS_MAX = 300


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def test_the_licence_is_an_spdx_expression_setuptools_can_read() -> None:
    """Goal: ``project.license`` is the SPDX string (not the deprecated table) and the build
    asks for a setuptools that reads it. Method: read pyproject.toml."""
    document = _pyproject()
    project = document["project"]
    assert isinstance(project, dict)
    assert project["license"] == "Apache-2.0"
    build = document["build-system"]
    assert isinstance(build, dict)
    assert "setuptools>=77" in build["requires"]


@pytest.mark.slow
def test_the_wheel_builds_without_a_deprecation_and_declares_its_licence(
    tmp_path: Path,
) -> None:
    """Goal: building the wheel as ``pip install`` does (an isolated build environment with the
    setuptools the build-system asks for) prints no deprecation warning, and the wheel's
    metadata carries ``License-Expression: Apache-2.0``. Method: ``pip wheel --no-deps -v``
    of the checkout; read its output and the built wheel's METADATA."""
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD_SECONDS_MAX,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "DeprecationWarning" not in output, output
    (wheel,) = tmp_path.glob("ledgerflow-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    assert metadata["License-Expression"] == "Apache-2.0"
