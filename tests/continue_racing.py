"""A loop that continues as new every few events, for the test that races signals against its
switches from another process (``continue_racing:registry``: this folder is on a worker
process's path)."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf

registry = lf.Registry()


@registry.workflow(name="absorb", version=1)
async def absorb(ctx: lf.WorkflowContext, state: dict[str, Any]) -> dict[str, Any]:
    """Take ``until`` ticks, continuing as new after every ``every`` of them; each run's input
    carries how many were taken so far (the event ids are in the runs' journals)."""
    taken = state["taken"]
    while taken < state["until"]:
        await ctx.wait_for("tick")
        taken += 1
        if taken % state["every"] == 0:
            ctx.continue_as_new({**state, "taken": taken})
    return {"taken": taken, "run": ctx.run}
