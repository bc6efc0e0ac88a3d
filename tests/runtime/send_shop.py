"""The workflows of tests/runtime/test_send_to_instance.py, importable by a worker process
(``ledgerflow worker send_shop:registry``) that the test kills at a send's fault point."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf
from ledgerflow.errors import KeyInUseError, TargetNotFoundError


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="inbox", version=1)
    async def inbox(ctx: lf.WorkflowContext, _: Any) -> dict[str, Any]:
        note = await ctx.wait_for("note")
        return {"note": note.payload, "from": note.sender}

    @registry.workflow(name="sender", version=1)
    async def sender(ctx: lf.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
        target = await ctx.start_workflow("inbox", None, key=order["to"])
        event_id = await ctx.signal_instance(("inbox", order["to"]), "note", order["note"])
        # Parked here, and replayed from the start when "later" wakes it.
        await ctx.wait_for("later")
        return {"target": target, "event_id": event_id}

    @registry.workflow(name="careful", version=1)
    async def careful(ctx: lf.WorkflowContext, _: Any) -> list[str]:
        seen = []
        try:
            await ctx.signal_instance("wf_nobody", "note", 1)
        except TargetNotFoundError as missing:
            seen.append(f"missing {missing.target}")
        try:
            await ctx.start_workflow("inbox", "another input", key="taken")
        except KeyInUseError as taken:
            seen.append(f"taken by {taken.instance_id}")
        await ctx.wait_for("later")
        return seen

    @registry.workflow(name="nosy", version=1)
    async def nosy(ctx: lf.WorkflowContext, target: str) -> str:
        try:
            await ctx.signal_instance(target, "note", "peek")
        except TargetNotFoundError as missing:
            return f"missing {missing.target}"
        return "delivered"

    @registry.workflow(name="fan_out", version=1)
    async def fan_out(ctx: lf.WorkflowContext, keys: list[str]) -> list[str]:
        # Three detached starts and three signals as parallel branches.
        started = await ctx.gather(*(ctx.start_workflow("inbox", None, key=k) for k in keys))
        await ctx.gather(*(ctx.signal_instance(("inbox", k), "note", k) for k in keys))
        await ctx.wait_for("later")
        return [str(s) for s in started]

    return registry


registry = _registry()
