"""Workflows the repair tests bring into each state a person has to settle.

One in-process participant, ``bank``, with no lookup and no deduplication (so a lost reply can
only be settled by an operator), and switches in :data:`FAULTS` that make its operations lose
their reply, reject for good, or make a local step fail; tests flip them between worker runs.
``applied`` records every application by key, as the participant's own ledger would.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ledgerflow import (
    EffectCall,
    Engine,
    Participant,
    Registry,
    RetryPolicy,
    SyncEngine,
    WorkflowContext,
)
from ledgerflow.errors import EffectRejectedError
from ledgerflow.model.ids import InstanceId

ONCE = RetryPolicy(attempts_max=1)
registry = Registry()
bank = registry.add_participant(Participant("bank"))
post = registry.add_participant(Participant("post"))

# Switches: "lose-charge", "reject-charge", "reject-refund", "poison-step".
FAULTS: set[str] = set()
# (operation, idempotency key, attempt) of every application the participants made.
applied: list[tuple[str, str, int]] = []


def reset() -> None:
    FAULTS.clear()
    applied.clear()


@bank.effect(classification="compensatable", compensation="refund", retry=ONCE)
async def charge(call: EffectCall) -> dict[str, Any]:
    if "reject-charge" in FAULTS:
        raise EffectRejectedError("card declined", error_code="declined", retryable=False)
    applied.append(("charge", call.idempotency_key, call.attempt))
    if "lose-charge" in FAULTS:
        raise ConnectionError("the reply was lost on the way back")
    return {"charged": call.payload["amount"], "key": call.idempotency_key}


@bank.compensation("refund", retry=ONCE)
async def refund(call: EffectCall) -> dict[str, Any]:
    if "reject-refund" in FAULTS:
        raise EffectRejectedError("refund desk closed", error_code="closed", retryable=False)
    applied.append(("refund", call.idempotency_key, call.attempt))
    return {"refunded": call.original_key}


@post.effect(classification="forward-recovery-only", retry=ONCE)
async def send(call: EffectCall) -> dict[str, Any]:
    applied.append(("send", call.idempotency_key, call.attempt))
    return {"sent": call.payload}


def double(amount: int) -> int:
    if "poison-step" in FAULTS:
        raise ValueError("poison input")
    return amount * 2


# Failing after the charge is pay's declared business failure: the charge is refunded.
@registry.workflow(name="pay", version=1, business_failures=(ValueError,))
async def pay(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    """Charge; fail afterwards when asked (so the charge is compensated by a refund)."""
    receipt = await ctx.effect(charge, {"amount": request["amount"]})
    if request.get("fail_after"):
        raise ValueError("failed after the charge")
    return {"receipt": receipt}


@registry.workflow(name="ship", version=1)
async def ship(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    """A pivot first (a letter cannot be unsent), then a local step and a charge: any failure
    after the pivot ends FORWARD_RECOVERY_REQUIRED, where only forward repairs help."""
    letter = await ctx.effect(send, {"to": request["to"]})
    doubled = await ctx.step("double", double, request["amount"], retry=ONCE)
    receipt = await ctx.effect(charge, {"amount": doubled})
    return {"letter": letter, "doubled": doubled, "receipt": receipt}


@registry.workflow(name="nap", version=1)
async def nap(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    """Charge, then wait for a signal that never comes (no timer): a waiting instance."""
    receipt = await ctx.effect(charge, {"amount": request["amount"]})
    await ctx.wait_for("go")
    return {"receipt": receipt}


# -- set-ups the repair tests share ----------------------------------------------------------

POLICY = """
[roles]
operator = ["resolve-effect", "retry-step", "skip-step", "run-compensation",
            "skip-compensation", "resume", "force-terminal", "cancel"]
viewer = []

[actors]
alice = ["operator"]
bob = ["operator"]
carol = ["viewer"]
"""


def drain(db: str) -> None:
    """An in-process worker until nothing is runnable."""

    async def run() -> None:
        async with Engine(db, registry) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


def started(db: str, workflow: str, key: str, request: dict[str, Any]) -> InstanceId:
    with SyncEngine(db, registry) as engine:
        return engine.start(workflow, key=key, input=request).instance_id


def parked_unknown(db: str, key: str) -> InstanceId:
    """A charge whose reply was lost at a participant with no lookup and no dedupe: parked."""
    FAULTS.add("lose-charge")
    instance_id = started(db, "pay", key, {"amount": 5})
    drain(db)
    FAULTS.discard("lose-charge")
    return instance_id
