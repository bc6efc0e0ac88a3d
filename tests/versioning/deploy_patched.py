"""A v1 of ``transfer`` whose code changed without a version bump: another fingerprint.

A worker of this registry must never take an instance pinned to the original v1 code: it
claims only instances pinned to this fingerprint (and none is started under it here).
"""

from __future__ import annotations

from typing import Any

from deploy_code import FAST, bank, pause

from ledgerflow import Registry, WorkflowContext

registry = Registry()
registry.add_participant(bank)


async def transfer_v1(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    # The fix: the credit carries the debit's receipt. Same version, other code.
    debit = await ctx.effect(bank.effects["debit"], {"amount": request["amount"]})
    await pause(ctx, request)
    credit = await ctx.effect(bank.effects["credit"], {"amount": request["amount"], "debit": debit})
    return {"code": "v1-patched", "debit": debit, "credit": credit}


registry.workflow(name="transfer", version=1, step_retry=FAST)(transfer_v1)
