"""The code of a service across a deploy that edits it in place (same versions, new code), as
the worker processes import it.

``old`` is the running deploy: ``transfer`` v1 and ``payout`` v1, each two effects at the bank
with a pause between them (a signal or a durable timer) for some. The next deploy comes as two
workers:

- ``compatible`` edits ``transfer`` v1 the way a bug fix does: the timer is half as long and
  the result says which code finished it. Another fingerprint, and every in-flight journal
  replays clean against it (a started timer keeps its recorded due time);
- ``incompatible`` edits ``payout`` v1 so that its first effect sends another payload (a fee):
  another fingerprint, and no journal that holds the first effect replays against it.

The bank offers a lookup but does not deduplicate: a second application of one key would be a
second row in its own ledger, which the test counts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=6, backoff_initial=timedelta(milliseconds=20))
PARTICIPANTS = ("bank:lookup",)

old = Registry()
compatible = Registry()
incompatible = Registry()
bank = declare(
    old,
    "bank:lookup",
    operations={"debit": "compensatable", "credit": "compensatable"},
    retry=FAST,
    # Held requests stay in flight until the test releases them, not until a timeout.
    timeout_seconds=30.0,
)
compatible.add_participant(bank)
incompatible.add_participant(bank)
debit, credit = bank.effects["debit"], bank.effects["credit"]


async def transfer(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    sent = await ctx.effect(debit, {"amount": request["amount"]})
    if request["pause"] == "signal":
        await ctx.wait_for("release")
    elif request["pause"] == "timer":
        await ctx.sleep(request["seconds"])
    received = await ctx.effect(credit, {"amount": request["amount"]})
    return {"code": "old", "debit": sent, "credit": received}


async def transfer_fixed(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    sent = await ctx.effect(debit, {"amount": request["amount"]})
    if request["pause"] == "signal":
        await ctx.wait_for("release")
    elif request["pause"] == "timer":
        await ctx.sleep(request["seconds"] / 2)
    received = await ctx.effect(credit, {"amount": request["amount"]})
    return {"code": "fixed", "debit": sent, "credit": received}


async def payout(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    sent = await ctx.effect(debit, {"amount": request["amount"]})
    if request["pause"] == "signal":
        await ctx.wait_for("release")
    elif request["pause"] == "timer":
        await ctx.sleep(request["seconds"])
    received = await ctx.effect(credit, {"amount": request["amount"]})
    return {"code": "old", "debit": sent, "credit": received}


async def payout_with_fee(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    sent = await ctx.effect(debit, {"amount": request["amount"], "fee": 1})
    if request["pause"] == "signal":
        await ctx.wait_for("release")
    elif request["pause"] == "timer":
        await ctx.sleep(request["seconds"])
    received = await ctx.effect(credit, {"amount": request["amount"]})
    return {"code": "fee", "debit": sent, "credit": received}


old.workflow(name="transfer", version=1, step_retry=FAST)(transfer)
old.workflow(name="payout", version=1, step_retry=FAST)(payout)
compatible.workflow(name="transfer", version=1, step_retry=FAST)(transfer_fixed)
incompatible.workflow(name="payout", version=1, step_retry=FAST)(payout_with_fee)
