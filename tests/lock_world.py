"""A journal with held durable locks in two tenants, for the faces' tests (``ledgerflow locks``,
``GET /v1/locks``): acme's ``account:1`` held by an instance waiting inside its block with one
instance queued, and a parked holder of ``account:2``; globex's ``account:1`` held too."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import ledgerflow as lf
from ledgerflow.operators.service import Operations

registry = lf.Registry()
ONCE = lf.RetryPolicy(attempts_max=1, backoff_initial=timedelta(milliseconds=1))


@registry.workflow(name="holder", version=1, defect_retry=ONCE)
async def holder(ctx: lf.WorkflowContext, job: dict[str, Any]) -> str:
    async with ctx.lock(job["lock"]):
        if job.get("defect"):
            raise RuntimeError("a bug while holding the lock")
        await ctx.wait_for("go")
    return "done"


@dataclass(frozen=True)
class LockWorld:
    url: str
    holder: str
    waiter: str
    parked: str
    foreign: str
    tokens: dict[str, str]


def _drain(url: str) -> None:
    async def run() -> None:
        async with lf.Engine(url, registry) as engine:
            await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


def build(url: str) -> LockWorld:
    """The journal at ``url`` holding the locks the module describes (started in turn, so the
    queue's order is known)."""
    ids = {}
    with Operations(url, registry=registry, migrate=None) as operations:
        for key, tenant, job in (
            ("h-1", "acme", {"lock": "account:1"}),
            ("w-1", "acme", {"lock": "account:1"}),
            ("p-1", "acme", {"lock": "account:2", "defect": True}),
            ("g-1", "globex", {"lock": "account:1"}),
        ):
            ids[key] = operations.start("holder", key=key, input=job, tenant=tenant).instance_id
            _drain(url)
        tokens = {
            name: operations.tokens().create(name=name, role=role, tenant=tenant, created_by="t")[0]
            for name, (role, tenant) in {
                "victor": ("viewer", "acme"),
                "root": ("admin", "*"),
            }.items()
        }
    return LockWorld(
        url=url,
        holder=ids["h-1"],
        waiter=ids["w-1"],
        parked=ids["p-1"],
        foreign=ids["g-1"],
        tokens=tokens,
    )
