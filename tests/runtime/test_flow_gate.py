"""The flow gate reads the effect limits once for every effect that asks at the same time.

Before this was fixed, a thousand effects dispatched at once each read the listing of limits
when the worker's copy was stale (1.87 reads per workflow in ``bench/profile_engine.py``):
a cost every effect paid whether its operation was limited or not.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ledgerflow as lf

EFFECTS = 200


def test_effects_dispatched_at_once_share_one_listing_of_the_limits(tmp_path: Path) -> None:
    registry = lf.Registry()
    api = registry.add_participant(lf.Participant("api"))

    @api.effect(classification="compensatable")
    async def send(call: lf.EffectCall) -> int:
        return int(call.payload["n"])

    @registry.workflow(name="notify", version=1)
    async def notify(ctx: lf.WorkflowContext, n: int) -> Any:
        return await ctx.effect(send, {"n": n})

    async def main() -> None:
        async with lf.Engine(f"sqlite:///{tmp_path}/journal.db", registry) as engine:
            # A limit on another operation: the listing is not empty, send is not limited.
            await engine.limit_effect("api", "other", concurrency_max=1)
            store: Any = engine.store
            reads: list[int] = []
            listing = store.effect_limits

            def counted() -> Any:
                reads.append(1)
                return listing()

            store.effect_limits = counted
            ids = await asyncio.gather(
                *(engine.start("notify", key=f"n-{n}", input=n) for n in range(EFFECTS))
            )
            await engine.worker(concurrency=EFFECTS).run(until_idle=True)
            results = [await engine.result(s.instance_id) for s in ids]
            assert results == list(range(EFFECTS))
            # The worker's copy was empty when the first effects asked, and it is refreshed
            # at most once a second: a run of a few seconds reads it a handful of times.
            assert 1 <= len(reads) <= 5, len(reads)

    asyncio.run(main())
