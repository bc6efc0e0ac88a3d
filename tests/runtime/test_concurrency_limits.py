"""Concurrency limits per workflow and per tenant, enforced across workers by the claim itself.

Two workers (two engines, two connections: as two processes) drive instances whose step
records how many run at once; the limit lives in the store, so both workers obey the same one.
Runs on SQLite and, when configured, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import ledgerflow as lf
from ledgerflow.errors import ConfigurationError


class Gauge:
    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def busy(self) -> int:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.02)
        self.now -= 1
        return 1


def _registry(gauge: Gauge) -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="limited", version=1)
    async def limited(ctx: lf.WorkflowContext, _: None) -> int:
        value: int = await ctx.step("busy", gauge.busy)
        return value

    return registry


@pytest.mark.parametrize("scope", ["workflow", "tenant"])
def test_two_workers_never_exceed_a_shared_limit(journal_url: str, scope: str) -> None:
    """A limit of 2 (on the workflow, or on the tenant): 12 instances, two workers with room
    for 8 each, never more than 2 running at once; all finish."""
    gauge = Gauge()
    registry = _registry(gauge)

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as one, lf.Engine(journal_url, registry) as two:
            if scope == "workflow":
                await one.set_concurrency_limit(workflow="limited", in_flight_max=2)
            else:
                await one.set_concurrency_limit(tenant="acme", in_flight_max=2)
            ids = [
                (await one.start("limited", key=f"k{n}", input=None, tenant="acme")).instance_id
                for n in range(12)
            ]
            workers = [
                engine.worker(lease_seconds=5, poll_seconds=0.01, concurrency=8)
                for engine in (one, two)
            ]
            await asyncio.gather(*(w.run(until_idle=True) for w in workers))
            for instance_id in ids:
                assert await one.result(instance_id, timeout=5) == 1
            await one.set_concurrency_limit(workflow="limited", in_flight_max=None)

    asyncio.run(main())
    assert gauge.most == 2


def test_starts_at_once_claim_no_more_than_the_limit(journal_url: str) -> None:
    """Twelve starts at once, sharing one transaction, with a running worker of the same
    engine: the start's own claims obey a limit of 2 as a worker's claim does (each counts the
    claims before it), and an instance outside any limit's scope is claimed by its start."""
    gauge = Gauge()
    registry = _registry(gauge)

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            await engine.set_concurrency_limit(tenant="acme", in_flight_max=2)
            worker = engine.worker(lease_seconds=5, poll_seconds=0.01, concurrency=16)
            running = asyncio.create_task(worker.run())
            # Once the worker has run an instance, it is taking starts' claims too.
            warm = await engine.start("limited", key="warm", input=None, tenant="other")
            assert await engine.result(warm.instance_id, timeout=10) == 1
            limited = await asyncio.gather(
                *(
                    engine.start("limited", key=f"k{n}", input=None, tenant="acme")
                    for n in range(12)
                )
            )
            free = await engine.start("limited", key="free", input=None, tenant="other")
            owned = [s for s in limited if s.instance.owner is not None]
            assert len(owned) == 2, [s.instance.owner for s in limited]
            assert free.instance.owner == worker.id
            for started in [*limited, free]:
                assert await engine.result(started.instance_id, timeout=10) == 1
            worker.stop()
            await running

    asyncio.run(main())
    assert gauge.most <= 3  # two of acme's and the one of "other", never more


def test_a_limit_names_one_scope(tmp_path: Path) -> None:
    """A limit names a workflow or a tenant, never both or neither, and is not negative."""
    with lf.SyncEngine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        with pytest.raises(ConfigurationError):
            engine.set_concurrency_limit(in_flight_max=1)
        with pytest.raises(ConfigurationError):
            engine.set_concurrency_limit(workflow="a", tenant="b", in_flight_max=1)
        with pytest.raises(ConfigurationError):
            engine.set_concurrency_limit(workflow="a", in_flight_max=-1)
        engine.set_concurrency_limit(workflow="a", in_flight_max=3)
        assert engine.store.limits() == {"workflow:a": 3}
