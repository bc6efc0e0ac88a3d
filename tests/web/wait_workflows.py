"""Workflows the waiting tests run, in-process and in real worker processes.

Worker subprocesses import this as ``wait_workflows:registry`` (the folder is on their
PYTHONPATH). When ``LEDGERFLOW_TEST_MARKERS`` names a folder, every fault point this process
reaches first drops a marker file there (``<point>-<business key>``): a fault rule can pause the
worker at a point, and the marker tells the test, without guessing with a sleep, that the worker
is inside that window now.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ledgerflow import Registry, WorkflowContext
from ledgerflow.errors import WaitTimeoutError
from ledgerflow.runtime import faults

MARKERS_ENVIRONMENT_VARIABLE = "LEDGERFLOW_TEST_MARKERS"

registry = Registry()


@registry.workflow(name="forever", version=1)
async def forever(ctx: WorkflowContext, _: None) -> Any:
    got = await ctx.wait_for("go")
    return got.payload


@registry.workflow(name="patient", version=1)
async def patient(ctx: WorkflowContext, timeout: float) -> dict[str, Any]:
    try:
        got = await ctx.wait_for("go", timeout=timeout)
    except WaitTimeoutError:
        return {"timed_out": True}
    return {"got": got.payload, "event_id": got.event_id}


@registry.workflow(name="two", version=1)
async def two(ctx: WorkflowContext, _: None) -> list[Any]:
    first = await ctx.wait_for("a")
    second = await ctx.wait_for("b")
    return [first.payload, second.payload]


@registry.workflow(name="approve", version=1)
async def approve(ctx: WorkflowContext, _: None) -> dict[str, Any]:
    decision = await ctx.wait_for_approval("refund", approvers=["alice", "bob"])
    return {"by": decision.sender, "decision": decision.payload}


@registry.workflow(name="nap", version=1)
async def nap(ctx: WorkflowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "rested"


def _mark_fault_points(folder: Path) -> None:
    # The engine calls faults.point through the module attribute, so wrapping it here sees
    # every point; the original still applies the LEDGERFLOW_FAULTS rules (the pause) after.
    original = faults.point

    def point(name: str, **where: Any) -> None:
        marker = folder / f"{name}-{where.get('instance')}"
        if not marker.exists():
            marker.write_text(repr(where), encoding="utf-8")
        original(name, **where)

    faults.point = point


if os.environ.get(MARKERS_ENVIRONMENT_VARIABLE):
    _mark_fault_points(Path(os.environ[MARKERS_ENVIRONMENT_VARIABLE]))
