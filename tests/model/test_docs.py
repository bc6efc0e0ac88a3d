"""docs/state-machines.md cannot drift from the machines: its diagrams are regenerated here.

The transition tables are the single source of truth (docs/style.md point 5). This test draws each
machine as a mermaid state diagram from its table and requires the document to contain that
exact block; when a table changes, the failure message prints the block to paste.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Any

import pytest

from ledgerflow.model.effect import EFFECT_MACHINE
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceStatus
from ledgerflow.model.machine import Machine
from ledgerflow.model.step import STEP_MACHINE

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machines.md"


def _declaration_order(kind: type[enum.Enum]) -> dict[enum.Enum, int]:
    return {member: index for index, member in enumerate(kind)}


def _members(machine: Machine[Any, Any]) -> list[enum.Enum]:
    """Every state and every event of a machine's enums."""
    state, event, _ = machine.edges()[0]
    states: type[enum.Enum] = type(state)
    events: type[enum.Enum] = type(event)
    return [*states, *events]


def mermaid(machine: Machine[Any, Any], *, initial: tuple[enum.Enum, ...] = ()) -> str:
    """The machine as a mermaid ``stateDiagram-v2`` block.

    Edges are ordered by source state, then event, in enum declaration order. A state named
    NEW (the absence of a row) is drawn as the start marker; ``initial`` adds a start edge for
    each state a machine's rows are created in (of their own); every terminal state gets an edge
    to the end marker.
    """
    edges = machine.edges()
    state_order = _declaration_order(type(edges[0][0]))
    event_order = _declaration_order(type(edges[0][1]))
    edges.sort(key=lambda edge: (state_order[edge[0]], event_order[edge[1]]))
    lines = ["```mermaid", "stateDiagram-v2"]
    for first in initial:
        lines.append(f"    [*] --> {first.value}")
    for source, event, target in edges:
        start = "[*]" if source.value == "NEW" else source.value
        lines.append(f"    {start} --> {target.value} : {event.value}")
    for state in sorted(machine.terminal, key=state_order.__getitem__):
        lines.append(f"    {state.value} --> [*]")
    lines.append("```")
    return "\n".join(lines)


DIAGRAMS = {
    "instance": mermaid(
        INSTANCE_MACHINE, initial=(InstanceStatus.RUNNING, InstanceStatus.SCHEDULED)
    ),
    "step": mermaid(STEP_MACHINE),
    "effect": mermaid(EFFECT_MACHINE),
}
MACHINES: dict[str, Machine[Any, Any]] = {
    "instance": INSTANCE_MACHINE,
    "step": STEP_MACHINE,
    "effect": EFFECT_MACHINE,
}


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_doc_contains_the_generated_diagram(name: str) -> None:
    """Goal: the drawn machine is the machine the code enforces.

    Method: regenerate the mermaid block from the machine's table and require it, exactly, in
    docs/state-machines.md.
    """
    text = DOC.read_text()
    assert DIAGRAMS[name] in text, (
        f"docs/state-machines.md is out of date for the {name} machine; replace its diagram "
        f"with:\n\n{DIAGRAMS[name]}\n"
    )


def test_doc_has_no_stale_diagram() -> None:
    """Goal: no leftover diagram of an older table stays in the document.

    Method: the document holds exactly the three generated mermaid blocks and no other.
    """
    blocks = re.findall(r"```mermaid\n.*?\n```", DOC.read_text(), flags=re.DOTALL)
    assert sorted(blocks) == sorted(DIAGRAMS.values())


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_doc_explains_every_state_and_event(name: str) -> None:
    """Goal: the prose explains each state and event, not only the picture.

    Method: outside the diagrams, every state and event value of the machine appears in
    backticks.
    """
    prose = re.sub(r"```mermaid\n.*?\n```", "", DOC.read_text(), flags=re.DOTALL)
    for member in _members(MACHINES[name]):
        assert f"`{member.value}`" in prose, f"{name}: `{member.value}` is not explained"


def test_doc_states_the_unknown_resolution_order_and_the_failed_rule() -> None:
    """Goal: the two rules readers most need are spelled out in the document.

    Method: look for the section headings of the UNKNOWN resolution order and of the
    FAILED-only-if-nothing-committed rule.
    """
    text = DOC.read_text()
    assert "## Resolving `UNKNOWN`" in text
    assert "## `FAILED` only if nothing was committed" in text


def test_every_write_decided_from_a_read_names_an_existing_test() -> None:
    """The table of writes decided from an earlier read names, for each, the test that
    commits a conflicting write between the read and the commit: each named test exists."""
    text = DOC.read_text()
    section = text[text.index("## Decided from a read") :]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`tests/" in line]
    assert len(rows) >= 15
    root = DOC.parents[1]
    for row in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert named, row
        for path, name in named:
            source = (root / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"{path}::{name}"
