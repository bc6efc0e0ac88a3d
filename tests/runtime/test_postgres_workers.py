"""Several workers on one PostgreSQL journal: each instance driven once, each effect once.

Two engines (two connection pools, as two processes would have) run workers against the same
schema at the same time; claims skip rows another worker holds, leases are measured by the
database's clock, and every effect's key is applied exactly once at the participant.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

import ledgerflow as lf
from postgres_schema import postgres_url

pytestmark = pytest.mark.postgres


def test_two_workers_share_one_journal(request: pytest.FixtureRequest) -> None:
    """60 instances, two concurrent workers: all succeed, each effect applied once, and the
    work was really shared (both workers drove some)."""
    url = postgres_url(request.node.name)
    applied: Counter[str] = Counter()
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))

    @stock.effect(classification="reversible")
    async def hold(call: lf.EffectCall) -> dict[str, Any]:
        applied[call.idempotency_key] += 1
        await asyncio.sleep(0)
        return {"held": call.payload}

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, n: int) -> int:
        await ctx.effect(hold, n)
        await ctx.effect(hold, n + 1000)
        return n

    async def main() -> None:
        async with lf.Engine(url, registry) as one, lf.Engine(url, registry) as two:
            ids = [(await one.start("order", key=f"k{n}", input=n)).instance_id for n in range(60)]
            first = one.worker(lease_seconds=5, poll_seconds=0.01, concurrency=8)
            second = two.worker(lease_seconds=5, poll_seconds=0.01, concurrency=8)
            await asyncio.gather(first.run(until_idle=True), second.run(until_idle=True))
            for n, instance_id in enumerate(ids):
                assert await one.result(instance_id, timeout=5) == n
            assert first.driven > 0
            assert second.driven > 0

    asyncio.run(main())
    assert len(applied) == 120
    assert set(applied.values()) == {1}
