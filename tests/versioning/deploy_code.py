"""The code of a service across a rolling deploy, as the worker processes import it.

``old`` is the deploy that is running: ``transfer`` v1. ``new`` is the next deploy: the same v1
code (the same function, so the same fingerprint: in-flight instances can move onto these
workers) and a v2 that new starts get. ``deploy_patched`` holds a v1 whose code changed
without a version bump (another fingerprint). Each workflow is registered by a call, not a
decorator, so the fingerprint (which covers the function's source) is the same in every
registry that registers the same function.

The participant, ``bank``, offers a lookup but does not deduplicate: a second application of
one key would be a second row in its own ledger, which the test counts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=6, backoff_initial=timedelta(milliseconds=20))
PARTICIPANTS = ("bank:lookup",)

old = Registry()
new = Registry()
bank = declare(
    old,
    "bank:lookup",
    operations={"debit": "compensatable", "credit": "compensatable"},
    retry=FAST,
    # Held requests stay in flight until the test releases them, not until a timeout.
    timeout_seconds=30.0,
)
new.add_participant(bank)


async def pause(ctx: WorkflowContext, request: dict[str, Any]) -> None:
    """Some transfers wait between their two effects: for a signal, or on a durable timer."""
    if request["pause"] == "signal":
        await ctx.wait_for("release")
    elif request["pause"] == "timer":
        await ctx.sleep(request["seconds"])


async def transfer_v1(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    debit = await ctx.effect(bank.effects["debit"], {"amount": request["amount"]})
    await pause(ctx, request)
    credit = await ctx.effect(bank.effects["credit"], {"amount": request["amount"]})
    return {"code": "v1", "debit": debit, "credit": credit}


async def transfer_v2(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    debit = await ctx.effect(bank.effects["debit"], {"amount": request["amount"], "fee": 1})
    credit = await ctx.effect(bank.effects["credit"], {"amount": request["amount"]})
    return {"code": "v2", "debit": debit, "credit": credit}


for registry in (old, new):
    registry.workflow(name="transfer", version=1, step_retry=FAST)(transfer_v1)
new.workflow(name="transfer", version=2, step_retry=FAST)(transfer_v2)
