"""The start transactions' fault points: a caller killed at ``start.before_commit`` leaves
nothing on the journal, one killed at ``start.after_commit`` leaves the instance (and, for
``signal_with_start``, its one event), and the caller's retry is answered with that instance,
not a second one (both backends)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import ledgerflow as lf
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey
from ledgerflow.runtime import faults
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="greet", version=1)
    async def greet(ctx: lf.WorkflowContext, name: str) -> str:
        return name

    return registry


@pytest.fixture
def crash_at() -> Iterator[list[FaultPlan]]:
    plans: list[FaultPlan] = []
    yield plans
    faults.install(None)


def _crash(point: str, kind: str) -> FaultPlan:
    plan = FaultPlan([FaultRule(point=point, action="crash", match={"kind": kind})])
    faults.install(plan)
    return plan


async def _start(engine: lf.Engine, kind: str) -> lf.Started:
    if kind == "start":
        return await engine.start("greet", key="k-1", input="a", start_in=60)
    answer = await engine.signal_with_start(
        "greet", key="k-1", input="a", signal="hello", event_id="e-1", start_in=60
    )
    return answer.started


@pytest.mark.parametrize("kind", ["start", "signal_with_start"])
@pytest.mark.parametrize("point", ["start.before_commit", "start.after_commit"])
def test_a_caller_killed_around_its_start_leaves_all_or_nothing(
    journal_url: str, kind: str, point: str, crash_at: list[FaultPlan]
) -> None:
    async def scenario() -> None:
        async with lf.Engine(journal_url, _registry()) as engine:
            plan = _crash(point, kind)
            with pytest.raises(SimulatedCrash):
                await _start(engine, kind)
            assert [name for name, _ in plan.fired] == [point]
            faults.install(None)
            iid = instance_id_for(DEFAULT_TENANT, "greet", BusinessKey("k-1"))
            found = engine.store.get_instance(iid)
            if point == "start.before_commit":
                assert found is None
            else:
                assert found is not None
                assert found.status.value == "SCHEDULED"
                inbox = engine.store.inbox(iid)
                assert len(inbox) == (1 if kind == "signal_with_start" else 0)
            again = await _start(engine, kind)
            assert again.instance.instance_id == iid
            assert again.created is (point == "start.before_commit")
            inbox = engine.store.inbox(iid)
            assert len(inbox) == (1 if kind == "signal_with_start" else 0)
            assert len(engine.store.list_instances(limit=10)) == 1

    asyncio.run(scenario())
