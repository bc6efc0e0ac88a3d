"""Asynchronous effects: accepted is not done; the participant's callback completes them.

The participant accepts the dispatch and answers later through ``Engine.complete_effect``; in
between the instance is WAITING (no lease, no coroutine). The callback may arrive after the
worker that dispatched is gone, may be repeated, or may not come before its deadline.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.testing import FakeClock


class Bank:
    """Accepts transfers now, settles them later; answers lookups from its own book."""

    def __init__(self) -> None:
        self.accepted: Counter[str] = Counter()
        self.settled: dict[str, dict[str, Any]] = {}
        self.registry = lf.Registry()
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.effect(classification="forward-recovery-only", completes_by_callback=600)
        async def transfer(call: lf.EffectCall) -> dict[str, Any]:
            self.accepted[call.idempotency_key] += 1
            return {"accepted": call.idempotency_key}

        @bank.lookup
        async def find(key: str, attempt: int) -> lf.LookupAnswer:
            if key in self.settled:
                return lf.LookupAnswer.applied(self.settled[key])
            return lf.LookupAnswer.unknown()

        @self.registry.workflow(name="pay", version=1)
        async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
            return await ctx.effect(transfer, {"amount": amount})


class Scene:
    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.clock = FakeClock()
        self.bank = Bank()

    def engine(self) -> lf.Engine:
        return lf.Engine(self.url, self.bank.registry, clock=self.clock)

    async def work(self) -> None:
        async with self.engine() as engine:
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

    async def key_of(self, instance_id: str) -> str:
        async with self.engine() as engine:
            [effect] = (await engine.detail(instance_id)).effects
            return effect.idempotency_key


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path / "journal.db")


def test_callback_after_the_worker_is_gone_completes_the_effect(scene: Scene) -> None:
    """The worker dispatches (accepted), the instance waits released; a later callback, taken
    by a fresh worker, confirms the effect with the callback's evidence. Repeats are no-ops."""

    async def main() -> None:
        async with scene.engine() as engine:
            started = await engine.start("pay", key="p-1", input=50)
        await scene.work()
        key = await scene.key_of(started.instance_id)
        async with scene.engine() as engine:
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.WAITING
            [effect] = (await engine.detail(started.instance_id)).effects
            assert effect.state is lf.EffectState.ACCEPTED
            first = await engine.complete_effect(key, applied=True, evidence={"ref": "T-9"})
            again = await engine.complete_effect(key, applied=True, evidence={"ref": "T-9"})
            assert first.outcome is lf.DeliveryOutcome.ACCEPTED
            assert again.outcome is lf.DeliveryOutcome.DUPLICATE
        await scene.work()
        async with scene.engine() as engine:
            assert await engine.result(started.instance_id, timeout=1) == {"ref": "T-9"}
            [effect] = (await engine.detail(started.instance_id)).effects
            assert effect.state is lf.EffectState.CONFIRMED
            late = await engine.complete_effect(
                key, applied=True, evidence={"ref": "T-9"}, event_id="another"
            )
            assert late.outcome is lf.DeliveryOutcome.ENDED
        assert scene.bank.accepted[key] == 1

    asyncio.run(main())


def test_no_callback_by_the_deadline_is_unknown_and_settled_by_lookup(scene: Scene) -> None:
    """The callback never comes: after the deadline the effect is UNKNOWN (never assumed
    failed), and the participant's lookup, which knows it settled, confirms it."""

    async def main() -> None:
        async with scene.engine() as engine:
            started = await engine.start("pay", key="p-2", input=70)
        await scene.work()
        key = await scene.key_of(started.instance_id)
        scene.bank.settled[key] = {"ref": "T-10"}
        scene.clock.advance(601)
        await scene.work()
        async with scene.engine() as engine:
            assert await engine.result(started.instance_id, timeout=1) == {"ref": "T-10"}
            events = (await engine.detail(started.instance_id)).timeline
            assert any(e.to_state == "UNKNOWN" for e in events if e.subject == "effect:1")
        assert scene.bank.accepted[key] == 1

    asyncio.run(main())


def test_a_callback_saying_not_applied_fails_the_effect(scene: Scene) -> None:
    """The participant calls back "not applied": the effect is FAILED and, nothing being
    confirmed, the instance ends FAILED."""

    async def main() -> None:
        async with scene.engine() as engine:
            started = await engine.start("pay", key="p-3", input=90)
        await scene.work()
        key = await scene.key_of(started.instance_id)
        async with scene.engine() as engine:
            await engine.complete_effect(key, applied=False, reason="insufficient funds")
        await scene.work()
        async with scene.engine() as engine:
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.FAILED
            [effect] = (await engine.detail(started.instance_id)).effects
            assert effect.state is lf.EffectState.FAILED
            assert "insufficient funds" in (effect.reason or "")

    asyncio.run(main())
