"""The demo's instances table: one line per step, each line inert on its own (issue 24).

The demo joined an instance's steps with newlines and then passed the whole text through the
escaping meant for ledger contents, so every step after the first was glued to the one before
it by a visible ``\\x0a``. The steps here come from a real run on a SQLite journal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path

from rich.console import Console

import ledgerflow as lf
from ledgerflow.cli.tables import steps_cell


def _twice(value: int) -> int:
    return value * 2


def _steps_of_a_run(tmp_path: Path) -> list[lf.StepRecord]:
    registry = lf.Registry()

    @registry.workflow(name="double", version=1)
    async def double(ctx: lf.WorkflowContext, value: int) -> int:
        once = await ctx.step("once", _twice, value)
        return await ctx.step("again", _twice, once)

    async def run() -> list[lf.StepRecord]:
        async with lf.Engine(f"sqlite:///{tmp_path / 'journal.db'}", registry) as engine:
            started = await engine.start("double", key="k", input=3)
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            assert await engine.result(started.instance_id, timeout=10) == 12
            return list((await engine.detail(started.instance_id)).steps)

    return asyncio.run(run())


def _rendered(steps: list[lf.StepRecord]) -> list[str]:
    out = Console(file=io.StringIO(), width=200, highlight=False)
    out.print(steps_cell(steps))
    assert isinstance(out.file, io.StringIO)
    return out.file.getvalue().splitlines()


def test_each_step_is_a_line_of_its_own(tmp_path: Path) -> None:
    """Goal: the steps cell shows ``1 once COMPLETED`` and ``2 again COMPLETED`` as two lines,
    with no ``\\x0a`` between them. Method: run a two-step workflow, render its steps' cell."""
    steps = _steps_of_a_run(tmp_path)
    lines = _rendered(steps)
    assert [line.split()[1:] for line in lines] == [["once", "COMPLETED"], ["again", "COMPLETED"]]
    assert not any("\\x0a" in line for line in lines)


def test_a_step_name_stays_inert(tmp_path: Path) -> None:
    """Goal: only the demo's own line breaks break lines; a newline or an escape inside a
    stored name is still shown as its escape. Method: the same run's first step renamed with
    a newline, ESC and U+202E (as a damaged or older row could hold), rendered."""
    first, second = _steps_of_a_run(tmp_path)
    odd = dataclasses.replace(first, name="x\n\x1b[2J\u202ey")
    lines = _rendered([odd, second])
    assert len(lines) == 2
    assert "x\\x0a\\x1b[2J\\u202ey" in lines[0]
    assert not any(raw in "".join(lines) for raw in ("\x1b", "\u202e"))
