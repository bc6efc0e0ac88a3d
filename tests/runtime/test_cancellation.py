"""Cancellation: durable and idempotent requests, stopping before new work, compensating what
the request asks (unless a pivot forbids it), and ending CANCELLED with the residual effects.

In-process participants keep their own count of applications by key; a crash fault pauses an
instance between steps the way a dead worker would.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.errors import IllegalTransitionError, PayloadError
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash

QUICK = lf.RetryPolicy(attempts_max=2, backoff_initial=timedelta(milliseconds=1))


class Desk:
    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.registry = lf.Registry()
        stock = self.registry.add_participant(lf.Participant("stock", deduplicates=True))
        mail = self.registry.add_participant(lf.Participant("mail", deduplicates=True))

        @stock.compensation("release", retry=QUICK)
        async def release(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"released": call.original_key}

        @stock.effect(classification="reversible", retry=QUICK, compensation="release")
        async def hold(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"held": call.payload}

        @mail.effect(classification="forward-recovery-only", retry=QUICK)
        async def send(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"sent": True}

        async def wait_for_gate() -> str:
            await self.gate.wait()
            return "opened"

        @self.registry.workflow(name="order", version=1)
        async def order(ctx: lf.WorkflowContext, request: dict[str, Any]) -> str:
            await ctx.effect(hold, request["sku"])
            if request.get("mail"):
                await ctx.effect(send, request["mail"])
            if request.get("gate"):
                await ctx.step("gate", wait_for_gate)
            await ctx.effect(hold, request["sku"] + "-extra")
            return "done"


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/journal.db"


async def _run(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)


async def _crash_after_first_hold(engine: lf.Engine) -> None:
    faults.install(
        FaultPlan([FaultRule(point="effect.after_outcome", action="crash", match={"seq": 1})])
    )
    try:
        with pytest.raises(SimulatedCrash):
            await engine.worker(lease_seconds=0.2, poll_seconds=0.01).run(until_idle=True)
    finally:
        faults.install(None)


def test_cancel_before_anything_ran(desk: Desk, url: str) -> None:
    """A request for an instance no worker has touched: CANCELLED, nothing applied, no residue."""

    async def main() -> None:
        async with lf.Engine(url, desk.registry) as engine:
            started = await engine.start("order", key="c-1", input={"sku": "A"})
            await engine.cancel(started.instance_id, reason="customer changed their mind")
            await _run(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.CANCELLED
            assert json.loads(record.result or "{}") == {"compensated": [], "residual": []}
            assert "step 1 (stock.hold) was not started" in (record.reason or "")
            assert not desk.applied

    asyncio.run(main())


def test_cancel_between_steps_compensates_what_was_done(desk: Desk, url: str) -> None:
    """The worker dies after the first hold; a cancel request arrives; the next worker stops
    before the second hold, releases the first under its own key, and ends CANCELLED."""

    async def main() -> None:
        async with lf.Engine(url, desk.registry) as engine:
            started = await engine.start("order", key="c-2", input={"sku": "A"})
            await _crash_after_first_hold(engine)
        async with lf.Engine(url, desk.registry) as engine:
            await engine.cancel(started.instance_id, reason="fraud check failed")
            await _run(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.CANCELLED
            summary = json.loads(record.result or "{}")
            assert summary == {"compensated": ["stock.release: CONFIRMED"], "residual": []}
            effects = (await engine.detail(started.instance_id)).effects
            [hold] = [e for e in effects if e.compensates is None]
            [release] = [e for e in effects if e.compensates == hold.effect_id]
            assert desk.applied == Counter({hold.idempotency_key: 1, release.idempotency_key: 1})

    asyncio.run(main())


def test_cancel_without_compensation_lists_the_residual_effects(desk: Desk, url: str) -> None:
    """compensate=False keeps what was done: CANCELLED with the hold as a residual effect."""

    async def main() -> None:
        async with lf.Engine(url, desk.registry) as engine:
            started = await engine.start("order", key="c-3", input={"sku": "A"})
            await _crash_after_first_hold(engine)
        async with lf.Engine(url, desk.registry) as engine:
            await engine.cancel(started.instance_id, reason="stop here", compensate=False)
            await _run(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.CANCELLED
            summary = json.loads(record.result or "{}")
            assert summary == {"compensated": [], "residual": ["stock.hold (step 1)"]}
            assert len(desk.applied) == 1

    asyncio.run(main())


def test_cancel_after_a_pivot_undoes_nothing(desk: Desk, url: str) -> None:
    """Once a forward-recovery-only effect is confirmed, a cancellation does not compensate
    across it: both confirmed effects stay, listed as residual, and the reason says why."""

    async def main() -> None:
        async with lf.Engine(url, desk.registry) as engine:
            started = await engine.start(
                "order", key="c-4", input={"sku": "A", "mail": "a@b", "gate": True}
            )
            worker = engine.worker(lease_seconds=0.3, poll_seconds=0.01)
            running = asyncio.create_task(worker.run())
            # The hold and the mail (the pivot) are applied; the gate step holds the instance.
            await until(lambda: len(desk.applied) == 2, what="the hold and the mail")
            session = worker.executor.sessions[started.instance_id]
            await engine.cancel(started.instance_id, reason="too late?")
            # The running instance is told at once (the request came from this process); only
            # then does its local step finish.
            await until(lambda: session.cancel_requested, what="the cancel request")
            desk.gate.set()
            await until(lambda: not worker.in_flight, what="the worker to let go")
            worker.stop()
            await running
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.CANCELLED
            assert "nothing is undone" in (record.reason or "")
            summary = json.loads(record.result or "{}")
            assert summary["residual"] == ["stock.hold (step 1)", "mail.send (step 2)"]
            assert summary["compensated"] == []
            assert len(desk.applied) == 2

    asyncio.run(main())


def test_cancel_is_idempotent_and_refused_once_ended(desk: Desk, url: str) -> None:
    """A repeated request changes nothing (one timeline event); an ended instance refuses; a
    request without a reason is refused before anything is written."""
    with lf.SyncEngine(url, desk.registry) as engine:
        started = engine.start("order", key="c-5", input={"sku": "A"})
        with pytest.raises(PayloadError):
            engine.cancel(started.instance_id, reason=" ")
        first = engine.cancel(started.instance_id, reason="one")
        second = engine.cancel(started.instance_id, reason="two")
        assert first.cancel_requested_at == second.cancel_requested_at
        assert second.cancel_reason == "one"
        events = [e for e in engine.detail(started.instance_id).timeline if e.subject == "cancel"]
        assert len(events) == 1

    async def main() -> None:
        async with lf.Engine(url, desk.registry) as engine:
            other = await engine.start("order", key="c-6", input={"sku": "B"})
            await _run(engine)
            assert (await engine.get(other.instance_id)).status is lf.InstanceStatus.SUCCEEDED
            with pytest.raises(IllegalTransitionError, match="already ended SUCCEEDED"):
                await engine.cancel(other.instance_id, reason="too late")

    asyncio.run(main())
