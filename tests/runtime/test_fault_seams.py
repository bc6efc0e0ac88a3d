"""Faults stay at their seams: with no fault plan installed, no point builds what it would
report; the one read of a private loop attribute has its fallback; the worker's lease clock
is chosen by what the clock says of itself, not by its class."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from ledgerflow.runtime.clock import SYSTEM_CLOCK
from ledgerflow.runtime.store_thread import _loop_has_nothing_else
from ledgerflow.testing import FakeClock

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "ledgerflow"


def _guarded(tree: ast.AST) -> tuple[int, list[int]]:
    """(points, lines of the points not inside ``if faults.plan is not None:``)."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    count, bare = 0, []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "point"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "faults"
        ):
            continue
        count += 1
        up = parents.get(node)
        while up is not None and not isinstance(up, ast.If):
            up = parents.get(up)
        test = ast.unparse(up.test) if isinstance(up, ast.If) else ""
        # The plan's check first, alone or before the point's own condition (`and` stops
        # at it when no plan is installed, so nothing after it is built).
        if test != "faults.plan is not None" and not test.startswith(
            "faults.plan is not None and "
        ):
            bare.append(node.lineno)
    return count, bare


def test_every_fault_point_is_behind_the_plan_check() -> None:
    """Goal: a process with no fault plan (every production process) builds no point's name
    or ``where``: each ``faults.point(...)`` call in the package sits inside ``if
    faults.plan is not None:``. The check is not vacuous: a bare point is found."""
    total = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "faults.py":
            continue
        count, bare = _guarded(ast.parse(path.read_text()))
        total += count
        assert bare == [], f"{path.relative_to(PACKAGE)}:{bare}: a fault point built unguarded"
    assert total >= 20
    planted = ast.parse('def f():\n    faults.point("x", a=1)\n')
    assert _guarded(planted) == (1, [2])
    after = ast.parse(
        'def f():\n    if ready and faults.plan is not None:\n        faults.point("x")\n'
    )
    assert _guarded(after) == (1, [3])


def test_the_private_loop_read_falls_back_to_the_store_thread() -> None:
    """Goal: asyncio's loop offers no public "is anything else ready?"; CPython's answers
    through ``_ready``, and a loop without it (uvloop) answers False, so calls go to the store
    thread as they would have without the question."""

    class OtherLoop:
        pass

    assert _loop_has_nothing_else(OtherLoop()) is False  # type: ignore[arg-type]

    async def ask() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        alone = _loop_has_nothing_else(loop)
        loop.call_soon(lambda: None)
        return alone, _loop_has_nothing_else(loop)

    assert asyncio.run(ask()) == (True, False)


@pytest.mark.parametrize(("clock", "real"), [(SYSTEM_CLOCK, True), (FakeClock(), False)])
def test_a_clock_says_whether_its_time_is_real(clock: object, real: bool) -> None:
    assert getattr(clock, "real_time") is real  # noqa: B009
