"""The engine in one process: starts by business key, bad input, verdicts, replay and drift.

In-process participants keep their own list of applications by key; the store is a real SQLite
file. Workers run until idle, so every test ends at quiescence without sleeping.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.errors import (
    ConcurrencyError,
    EffectFailedError,
    EffectRejectedError,
    PayloadError,
    StepFailedError,
    UnknownVersionError,
    UnknownWorkflowError,
    WorkflowError,
)
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash

QUICK = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=1))


class Shop:
    """A registry with in-process participants that record every application by key."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()
        self.reject_next: int = 0
        self.registry = lf.Registry()
        stock = self.registry.add_participant(lf.Participant("stock", deduplicates=True))
        mail = self.registry.add_participant(lf.Participant("mail", deduplicates=True))

        @stock.compensation("release", retry=QUICK)
        async def release(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"released": call.original_key}

        @stock.effect(classification="reversible", retry=QUICK, compensation="release")
        async def hold(call: lf.EffectCall) -> dict[str, Any]:
            if self.reject_next:
                self.reject_next -= 1
                raise EffectRejectedError("busy", error_code="busy")
            self.applied[call.idempotency_key] += 1
            return {"held": call.payload}

        @mail.effect(classification="forward-recovery-only", retry=QUICK)
        def send(call: lf.EffectCall) -> dict[str, Any]:  # a blocking effect: runs on a thread
            self.applied[call.idempotency_key] += 1
            return {"sent": True}

        self.hold, self.send = hold, send
        self.ran: Counter[str] = Counter()

        # The order's and plain's failures are declared business failures: they end the
        # instance by the effect ledger (FAILED, COMPENSATED, FORWARD_RECOVERY_REQUIRED).
        @self.registry.workflow(
            name="order", version=1, step_retry=QUICK, business_failures=(RuntimeError,)
        )
        async def order(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
            self.ran[ctx.business_key] += 1
            held = await ctx.effect(hold, request["sku"])
            if request.get("fail") == "after_hold":
                raise RuntimeError("boom after hold")
            if request.get("mail"):
                await ctx.effect(send, {"to": request["mail"]})
            if request.get("fail") == "after_mail":
                raise RuntimeError("boom after mail")
            return {"held": held}

        @self.registry.workflow(
            name="plain", version=1, step_retry=QUICK, business_failures=(ValueError,)
        )
        async def plain(ctx: lf.WorkflowContext, n: int) -> int:
            if n < 0:
                raise ValueError("negative")
            doubled: int = await ctx.step("double", lambda x: x * 2, n)
            return doubled


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/journal.db"


async def _run(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)


def test_duplicate_start_returns_same_instance_and_runs_once(shop: Shop, url: str) -> None:
    """Starting one business key twice (also from a second engine) yields one instance, one
    run of the workflow and one application of each effect."""

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as a, lf.Engine(url, shop.registry) as b:
            first = await a.start("order", key="o-1", input={"sku": "X"})
            second = await b.start("order", key="o-1", input={"sku": "X"})
            assert first.created
            assert not second.created
            assert first.instance_id == second.instance_id
            await _run(a)
            await _run(b)
            assert await b.result(first.instance_id, timeout=5) == {"held": {"held": "X"}}
            assert shop.ran["o-1"] == 1
            assert list(shop.applied.values()) == [1]

    asyncio.run(main())


def test_same_key_with_other_input_is_refused(shop: Shop, url: str) -> None:
    """A repeated start that asks for something else is a caller's bug, not the same start."""

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            await engine.start("order", key="o-2", input={"sku": "X"})
            with pytest.raises(ConcurrencyError, match="another input"):
                await engine.start("order", key="o-2", input={"sku": "Y"})

    asyncio.run(main())


def test_bad_input_gets_specific_errors_and_stores_nothing(shop: Shop, url: str) -> None:
    """Unknown workflow, unknown version, unserialisable input and an empty key each raise
    their own error, and no instance is created."""
    with lf.SyncEngine(url, shop.registry) as engine:
        with pytest.raises(UnknownWorkflowError) as unknown:
            engine.start("nope", key="k", input=1)
        assert unknown.value.code == "LF102"
        with pytest.raises(UnknownVersionError) as version:
            engine.start("order", key="k", input={"sku": "X"}, version=7)
        assert version.value.code == "LF103"
        with pytest.raises(PayloadError, match="not JSON-serialisable"):
            engine.start("order", key="k", input={"sku": {1, 2}})
        with pytest.raises(PayloadError, match="business key"):
            engine.start("order", key="", input={"sku": "X"})
        assert engine.list() == []


def test_sync_start_and_result_from_another_engine(shop: Shop, url: str) -> None:
    """Synchronous code starts an instance; a worker elsewhere finishes it; a second
    synchronous engine (another connection) reads the result."""
    with lf.SyncEngine(url, shop.registry) as engine:
        started = engine.start("plain", key="p-1", input=21)

    async def work() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            await _run(engine)

    asyncio.run(work())
    with lf.SyncEngine(url, shop.registry) as reader:
        assert reader.result(started.instance_id, timeout=5) == 42


def test_failure_verdicts_follow_the_effect_ledger(shop: Shop, url: str) -> None:
    """FAILED only when no effect was confirmed; after a confirmed reversible effect its
    compensation runs under its own key and the instance is COMPENSATED; after a confirmed
    forward-recovery-only effect it is FORWARD_RECOVERY_REQUIRED."""

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            clean = await engine.start("plain", key="f-1", input=-1)
            held = await engine.start("order", key="f-2", input={"sku": "X", "fail": "after_hold"})
            pivot = await engine.start(
                "order", key="f-3", input={"sku": "X", "mail": "a@b", "fail": "after_mail"}
            )
            await _run(engine)
            statuses = {
                s.instance_id: (await engine.get(s.instance_id)) for s in (clean, held, pivot)
            }
            assert statuses[clean.instance_id].status is lf.InstanceStatus.FAILED
            assert statuses[held.instance_id].status is lf.InstanceStatus.COMPENSATED
            effects = (await engine.detail(held.instance_id)).effects
            [hold] = [e for e in effects if e.compensates is None]
            [release] = [e for e in effects if e.compensates is not None]
            assert release.compensates == hold.effect_id
            assert release.idempotency_key == "compensate:" + hold.idempotency_key
            assert shop.applied[release.idempotency_key] == 1
            assert statuses[pivot.instance_id].status is lf.InstanceStatus.FORWARD_RECOVERY_REQUIRED
            with pytest.raises(WorkflowError, match="FAILED"):
                await engine.result(clean.instance_id, timeout=1)

    asyncio.run(main())


def test_rejected_effect_retries_under_the_same_key_then_fails(shop: Shop, url: str) -> None:
    """A proven rejection is retried under the same key within the attempt bound; after the
    last attempt the workflow sees EffectFailedError and, with nothing confirmed, ends FAILED."""
    shop.reject_next = 10

    caught: list[str] = []

    @shop.registry.workflow(name="catcher", version=1)
    async def catcher(ctx: lf.WorkflowContext, sku: str) -> str:
        try:
            await ctx.effect(shop.hold, sku)
        except EffectFailedError as exc:
            caught.append(exc.code)
            raise
        return "unreachable"

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            started = await engine.start("catcher", key="r-1", input="X")
            await _run(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.FAILED
            [effect] = (await engine.detail(started.instance_id)).effects
            assert effect.state is lf.EffectState.FAILED
            assert effect.attempt == QUICK.attempts_max
            assert caught == ["LF502"]
            assert not shop.applied

    asyncio.run(main())


def test_local_step_retries_then_fails_into_workflow_code(shop: Shop, url: str) -> None:
    """A local step that keeps failing is tried attempts_max times, then StepFailedError."""
    calls: list[int] = []

    def flaky(n: int) -> int:
        calls.append(n)
        raise OSError("disk")

    @shop.registry.workflow(name="flaky", version=1, step_retry=QUICK)
    async def flaky_flow(ctx: lf.WorkflowContext, n: int) -> int:
        try:
            value: int = await ctx.step("flaky", flaky, n)
        except StepFailedError:
            return -1
        return value

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            started = await engine.start("flaky", key="s-1", input=5)
            await _run(engine)
            assert await engine.result(started.instance_id, timeout=1) == -1
            [step, *_] = (await engine.detail(started.instance_id)).steps
            assert step.status is lf.StepStatus.FAILED
            assert step.attempt == QUICK.attempts_max
            assert len(calls) == QUICK.attempts_max

    asyncio.run(main())


def test_replay_divergence_is_parked(shop: Shop, url: str) -> None:
    """Code that asks for another step where the journal has one is parked, not run on.

    A crash fault stops the first worker after step 1; the registry is then given a
    different definition with the same fingerprint inputs (we swap the function object
    behind the registered definition), so replay meets another step name at position 1.
    """
    registry = lf.Registry()

    @registry.workflow(name="w", version=1)
    async def w(ctx: lf.WorkflowContext, n: int) -> int:
        a: int = await ctx.step("one", abs, n, checkpoint=True)
        b: int = await ctx.step("two", abs, a)
        return b

    async def first() -> str:
        faults.install(
            FaultPlan([FaultRule(point="step.before_execute", action="crash", match={"seq": 2})])
        )
        try:
            async with lf.Engine(url, registry) as engine:
                started = await engine.start("w", key="d-1", input=-3)
                with pytest.raises(SimulatedCrash):
                    await engine.worker(lease_seconds=0.2).run(until_idle=True)
                return started.instance_id
        finally:
            faults.install(None)

    instance_id = asyncio.run(first())

    async def changed(ctx: lf.WorkflowContext, n: int) -> int:
        c: int = await ctx.step("renamed", abs, n)
        return c

    definition = registry.get("w", 1)
    object.__setattr__(definition, "function", changed)

    async def second() -> None:
        async with lf.Engine(url, registry) as engine:
            await _run(engine)
            record = await engine.get(instance_id)
            assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
            assert record.reason_code == "replay_divergence"
            assert "'one'" in (record.reason or "")
            assert "'renamed'" in (record.reason or "")

    asyncio.run(second())


def test_many_instances_run_concurrently_in_one_worker(shop: Shop, url: str) -> None:
    """200 instances in one worker process all succeed, each effect applied once."""

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            ids = [
                (await engine.start("order", key=f"c-{i}", input={"sku": f"S{i}"})).instance_id
                for i in range(200)
            ]
            await _run(engine)
            for instance_id in ids:
                assert (await engine.get(instance_id)).status is lf.InstanceStatus.SUCCEEDED
            assert len(shop.applied) == 200
            assert set(shop.applied.values()) == {1}

    asyncio.run(main())


def test_stale_owner_writes_are_refused(shop: Shop, url: str) -> None:
    """After a second owner claims an instance (the first one's lease lapsed), every write
    of the first owner is refused by the store and changes nothing."""
    from ledgerflow.ledger.records import Commit
    from ledgerflow.ledger.transitions import instance_change
    from ledgerflow.model.ids import WorkerId
    from ledgerflow.model.instance import InstanceEvent

    with lf.SyncEngine(url, shop.registry) as engine:
        started = engine.start("plain", key="fence-1", input=1)
        store = engine.store
        [first] = store.claim(owner=WorkerId("a"), now=1e10, lease_seconds=1, limit=1)
        [second] = store.claim(owner=WorkerId("b"), now=1e10 + 2, lease_seconds=1, limit=1)
        assert second.generation == first.generation + 1
        stale = Commit(
            instance_id=first.instance_id,
            owner=WorkerId("a"),
            generation=first.generation,
            writes=(
                instance_change(lf.InstanceStatus.RUNNING, InstanceEvent.COMPLETE, result="1"),
            ),
        )
        [error] = store.commit([stale], now=1e10 + 3)
        assert error is not None
        assert error.code == "LF301"
        record = engine.get(started.instance_id)
        assert record.status is lf.InstanceStatus.RUNNING
        assert record.owner == "b"
        assert record.generation == second.generation


def test_workflow_handles_a_failed_effect_itself(shop: Shop, url: str) -> None:
    """Workflow code that catches EffectFailedError and takes another path succeeds, and the
    ledger still shows the refused effect as FAILED next to the one that replaced it."""
    shop.reject_next = 10

    @shop.registry.workflow(name="fallback", version=1)
    async def fallback(ctx: lf.WorkflowContext, sku: str) -> str:
        try:
            await ctx.effect(shop.hold, sku)
        except EffectFailedError:
            shop.reject_next = 0
            await ctx.effect(shop.hold, sku + "-substitute")
            return "substitute"
        return "first choice"

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            started = await engine.start("fallback", key="fb-1", input="X")
            await _run(engine)
            assert await engine.result(started.instance_id, timeout=1) == "substitute"
            states = [e.state for e in (await engine.detail(started.instance_id)).effects]
            assert states == [lf.EffectState.FAILED, lf.EffectState.CONFIRMED]

    asyncio.run(main())


def test_the_store_refuses_failed_once_an_effect_is_confirmed(shop: Shop, url: str) -> None:
    """FAILED claims nothing happened anywhere: with a confirmed effect on the ledger, the store
    refuses that write even from the instance's legitimate owner, and changes nothing.

    The worker dies right after the first effect is confirmed; a new owner claims the instance
    and tries to end it FAILED.
    """
    from ledgerflow.errors import IllegalTransitionError
    from ledgerflow.ledger.records import Commit
    from ledgerflow.ledger.transitions import instance_change
    from ledgerflow.model.ids import WorkerId
    from ledgerflow.model.instance import InstanceEvent

    async def main() -> str:
        faults.install(
            FaultPlan([FaultRule(point="effect.after_outcome", action="crash", match={"seq": 1})])
        )
        try:
            async with lf.Engine(url, shop.registry) as engine:
                started = await engine.start("order", key="nf-1", input={"sku": "X"})
                with pytest.raises(SimulatedCrash):
                    await engine.worker(lease_seconds=0.2).run(until_idle=True)
                return started.instance_id
        finally:
            faults.install(None)

    instance_id = asyncio.run(main())
    with lf.SyncEngine(url, shop.registry) as engine:
        store = engine.store
        [mine] = store.claim(owner=WorkerId("w"), now=1e12, lease_seconds=5, limit=1)
        assert mine.instance_id == instance_id
        commit = Commit(
            instance_id=instance_id,
            owner=WorkerId("w"),
            generation=mine.generation,
            writes=(instance_change(lf.InstanceStatus.RUNNING, InstanceEvent.FAIL_CLEAN),),
        )
        [error] = store.commit([commit], now=1e12)
        assert isinstance(error, IllegalTransitionError)
        assert "1 effect(s) are confirmed" in str(error)
        assert engine.get(instance_id).status is lf.InstanceStatus.RUNNING


def test_stopping_a_worker_gives_unfinished_leases_back(shop: Shop, url: str) -> None:
    """A worker stopped while an instance is stuck in a slow local step (past the grace period)
    cancels it and releases its lease at once: the instance is unowned and claimable now, not
    when the lease would have lapsed, and a second worker finishes it."""
    gate = asyncio.Event()

    async def slow() -> str:
        await gate.wait()
        return "done"

    @shop.registry.workflow(name="slow", version=1)
    async def slow_flow(ctx: lf.WorkflowContext, _: None) -> str:
        value: str = await ctx.step("slow", slow)
        return value

    async def main() -> None:
        async with lf.Engine(url, shop.registry) as engine:
            started = await engine.start("slow", key="s-stop", input=None)
            worker = engine.worker(lease_seconds=60, poll_seconds=0.01)
            running = asyncio.create_task(worker.run(grace_seconds=0.05))
            await until(lambda: worker.in_flight, what="the worker to claim the instance")
            assert worker.in_flight == 1
            worker.stop()
            await running
            record = await engine.get(started.instance_id)
            assert record.owner is None
            assert record.status is lf.InstanceStatus.RUNNING
            gate.set()
            await _run(engine)
            assert await engine.result(started.instance_id, timeout=5) == "done"

    asyncio.run(main())
