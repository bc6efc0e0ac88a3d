"""docs/operators.md and docs/errors.md cannot drift from the command line and its bounds.

In the manner of ``tests/model/test_docs.py``: the documents are read and held to the code.
Every command that prints JSON has its shape in the operators' table; every bound the
documents quote by number is the number in ``ledgerflow.limits``.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from ledgerflow import limits
from ledgerflow.cli.main import cli

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _json_commands(group: click.Group, prefix: str = "") -> set[str]:
    """Every command (``repair resume``...) that has a --json option."""
    found: set[str] = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found |= _json_commands(command, f"{path} ")
        elif any("--json" in getattr(p, "opts", []) for p in command.params):
            found.add(path)
    return found


def _shapes_table() -> str:
    text = (DOCS / "operators.md").read_text(encoding="utf-8")
    match = re.search(r"^\| kind \| commands \| shape \|\n(.*?)\n\n", text, re.S | re.M)
    assert match is not None, "docs/operators.md has no table of JSON shapes"
    return match.group(1)


def test_every_json_command_has_its_shape_documented() -> None:
    """Goal: a command that prints JSON is in the table of shapes (one shape per kind).

    Method: walk the click commands for a --json option; each is named in the table
    (subcommands of a group as `group ...`), and the table names no command that is not one.
    """
    table = _shapes_table()
    documented = set(re.findall(r"`([a-z][a-z -]*?)(?: \.\.\.)?`", table))
    for path in _json_commands(cli):
        group, _, _ = path.partition(" ")
        expected = f"{group} ..." if " " in path else path
        assert f"`{expected}`" in table, f"{path} is not in the table of JSON shapes"
    top = {path.partition(" ")[0] for path in _json_commands(cli)}
    for name in documented:
        head = name.split(" ")[0]
        assert head in top or name.startswith("GET"), f"{name} prints no JSON"


def _spaced(number: int) -> str:
    """A number as the documents write it: thousands apart (4 000 000)."""
    return f"{number:,}".replace(",", " ")


@pytest.mark.parametrize(
    ("document", "phrase"),
    [
        ("errors.md", f"`JSON_DEPTH_MAX`, {limits.JSON_DEPTH_MAX} levels"),
        ("operators.md", f"`limits.JSON_DEPTH_MAX`, {limits.JSON_DEPTH_MAX} levels"),
        ("operators.md", f"`limits.JSON_INPUT_BYTES_MAX`, {_spaced(limits.JSON_INPUT_BYTES_MAX)}"),
        ("errors.md", f"{limits.BUSINESS_KEY_LENGTH_MAX} characters for a business key"),
        ("errors.md", f"{limits.TENANT_LENGTH_MAX} for the others"),
        ("errors.md", f"{limits.POSTGRES_CONNECT_TIMEOUT_SECONDS} s unless the URL"),
        ("operators.md", f"{limits.POSTGRES_CONNECT_TIMEOUT_SECONDS} s unless the URL"),
    ],
)
def test_documented_bounds_are_the_limits(document: str, phrase: str) -> None:
    """Goal: a bound quoted in the documents is the bound the code keeps.

    Method: each phrase, built from ``ledgerflow.limits``, appears in its document (line breaks
    read as spaces).
    """
    text = " ".join((DOCS / document).read_text(encoding="utf-8").split())
    assert phrase in text
