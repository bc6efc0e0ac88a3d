"""A journal for the console's signal and approval forms: acme's refund waiting for an
approval by alice or bob (``wait_workflows``' ``approve``), an instance that succeeded, and a
token per person (alice and mallory signal, olga operates, victor views, root administers)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from wait_workflows import registry

from ledgerflow import Engine
from ledgerflow.operators.service import Operations

TOKENS = {
    # name: (role, tenant)
    "alice": ("signaller", "acme"),
    "mallory": ("signaller", "acme"),
    "olga": ("operator", "acme"),
    "victor": ("viewer", "acme"),
    "root": ("admin", "*"),
}


@dataclass(frozen=True)
class Approvals:
    url: str
    refund: str  # waiting for "refund", approvers alice and bob
    done: str  # SUCCEEDED, its result recorded
    tokens: dict[str, str]


def drain(url: str) -> None:
    """Run the journal's due work to idle, in this process."""

    async def run() -> None:
        async with Engine(url, registry) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


def build(url: str) -> Approvals:
    with Operations(url, registry=registry, migrate=None) as operations:
        refund = operations.start("approve", key="refund-1", input=None, tenant="acme")
        done = operations.start("patient", key="quick-1", input=0.0, tenant="acme")
        tokens = {
            name: operations.tokens().create(
                name=name, role=role, tenant=tenant, created_by="test"
            )[0]
            for name, (role, tenant) in TOKENS.items()
        }
    drain(url)
    with Operations(url) as operations:
        assert operations.detail(done.instance_id).instance.status.value == "SUCCEEDED"
    return Approvals(url=url, refund=refund.instance_id, done=done.instance_id, tokens=tokens)
