"""A journal holding what the perimeter's tests need: two tenants, a parked instance with an
outcome in doubt, hostile text in every field a person reads, and a token per role.

The ``bank`` participant has no lookup and does not deduplicate, so a lost reply can only be
settled by an operator: the instance parks in MANUAL_INTERVENTION with its charge UNKNOWN.
Its business key holds markup, and the ledger's texts hold terminal escapes and a
bidirectional override (in the participant's error and a signal's payload): the console and
the CLI must show all of them inert.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ledgerflow import EffectCall, Engine, Participant, Registry, RetryPolicy, WorkflowContext
from ledgerflow.operators.service import Operations

registry = Registry()
bank = registry.add_participant(Participant("bank"))
LOSE: set[str] = set()

MARKUP_KEY = "<script>alert('key')</script><img src=x onerror=alert(1)>"
TERMINAL_TEXT = "\x1b[31mred\x1b[0m \x1b]0;owned\x07 \u202egnp.exe"


@bank.effect(
    classification="compensatable", compensation="refund", retry=RetryPolicy(attempts_max=1)
)
async def charge(call: EffectCall) -> dict[str, Any]:
    if call.payload.get("lose"):
        raise ConnectionError(f"the reply was lost {TERMINAL_TEXT}")
    return {"charged": call.payload["amount"]}


@bank.compensation("refund", retry=RetryPolicy(attempts_max=1))
async def refund(call: EffectCall) -> dict[str, Any]:
    return {"refunded": call.original_key}


@registry.workflow(name="pay", version=1)
async def pay(ctx: WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    receipt = await ctx.effect(charge, request)
    await ctx.wait_for("shipped")
    return {"receipt": receipt}


@dataclass(frozen=True)
class World:
    url: str
    parked: str  # acme's instance, parked with its charge UNKNOWN
    waiting: str  # acme's instance, charged and waiting for "shipped"
    foreign: str  # globex's instance
    tokens: dict[str, str]  # name -> token text


def drain(url: str) -> None:
    async def run() -> None:
        async with Engine(url, registry) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


TOKENS = {
    # name: (role, tenant)
    "olga": ("operator", "acme"),
    "victor": ("viewer", "acme"),
    "sam": ("signaller", "acme"),
    "gail": ("operator", "globex"),
    "root": ("admin", "*"),
}


def build(url: str) -> World:
    """The journal at ``url`` as the tests expect it (created if missing)."""
    with Operations(url, registry=registry, migrate=None) as operations:
        parked = operations.start(
            "pay", key=MARKUP_KEY, input={"amount": 5, "lose": True}, tenant="acme"
        ).instance_id
        waiting = operations.start("pay", key="order-2", input={"amount": 7}, tenant="acme")
        foreign = operations.start("pay", key="g-1", input={"amount": 9}, tenant="globex")
        tokens = {
            name: operations.tokens().create(
                name=name, role=role, tenant=tenant, created_by="test"
            )[0]
            for name, (role, tenant) in TOKENS.items()
        }
    drain(url)
    with Operations(url) as operations:
        operations.signal(
            waiting.instance_id,
            "note",
            event_id="e-hostile",
            payload={"text": TERMINAL_TEXT},
            actor="test",
        )
    return World(
        url=url,
        parked=parked,
        waiting=waiting.instance_id,
        foreign=foreign.instance_id,
        tokens=tokens,
    )
