"""A test's fake clock drives the engine on every backend, PostgreSQL included: leases, timers
and due times are measured by the engine's clock whenever it is not the system's (the
database's clock would never see the time a fake clock makes pass)."""

from __future__ import annotations

import asyncio

import ledgerflow as lf
from ledgerflow.testing import FakeClock


def test_a_fake_clock_engine_claims_sleeps_and_finishes(journal_url: str) -> None:
    """Goal: with a FakeClock an instance is claimed, sleeps an hour of fake time durably (it is
    released and claimed again when the clock is moved past its timer) and succeeds.

    Method: a workflow with a step, a one-hour durable sleep and a step; the worker runs until
    nothing is due, the clock moves an hour on, the worker runs again."""
    registry = lf.Registry()

    @registry.workflow(name="nap", version=1)
    async def nap(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.step("before", lambda: 1)
        await ctx.sleep(3600)
        await ctx.step("after", lambda: 2)
        return "rested"

    clock = FakeClock(autojump=False)

    async def main() -> None:
        async with lf.Engine(journal_url, registry, clock=clock) as engine:
            started = await engine.start("nap", key="n")
            worker = engine.worker(lease_seconds=5, poll_seconds=0.01)
            await worker.run(until_nothing_due=True)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.WAITING
            clock.advance(3601)
            await worker.run(until_nothing_due=True)
            assert await engine.result(started.instance_id, timeout=5) == "rested"

    asyncio.run(main())
