"""An arrival between a worker's read and the park it decides from is never slept through.

A wait reads the inbox and the cancel request, decides to park until its timer, and commits
the park; a signal, callback or cancel request that another process commits between the read
and the park must still move the instance on. Each test lands the arrival exactly there (a
fault point between the read and the commit delivers it through another connection, as another
process would) and then lets the worker run until nothing is due, without moving time: the
instance must have taken what arrived, not wait for a timer of an hour or for ever.

Both backends: the arrival is a second store's transaction, the park the worker's.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.runtime import faults
from lost_wakeups import ArriveAt, registry


class Scene:
    def __init__(self, url: str) -> None:
        self.url = url
        self.registry = registry
        # Another process's view: its own connection, its own transactions.
        self.outside = lf.SyncEngine(url, self.registry)

    async def work(self, plan: ArriveAt | None = None) -> None:
        """A worker until nothing is due now: time does not move, so a timer never fires."""
        faults.install(plan)
        try:
            async with lf.Engine(self.url, self.registry) as engine:
                worker = engine.worker(lease_seconds=30, poll_seconds=0.05)
                await asyncio.wait_for(worker.run(until_nothing_due=True), timeout=60)
        finally:
            faults.install(None)
        if plan is not None:
            assert plan.arrived == 1, f"the arrival never landed at {plan.point}"

    def record(self, instance_id: str) -> lf.InstanceRecord:
        return self.outside.get(instance_id)


@pytest.fixture
def scene(journal_url: str) -> Any:
    scene = Scene(journal_url)
    yield scene
    scene.outside.close()


def test_a_signal_between_two_waits_is_taken(scene: Scene) -> None:
    """The instance took "a" and starts waiting for "b"; "b" arrives after its read of the
    inbox and before its park: the park must not put it to sleep for ever."""
    started = scene.outside.start("two", key="w-1")
    scene.outside.signal(started.instance_id, "a", event_id="a-1", payload=1)
    arrive = ArriveAt(
        "wait.before_suspend",
        lambda: scene.outside.signal(started.instance_id, "b", event_id="b-1", payload=2),
        key="w-1",
    )
    asyncio.run(scene.work(arrive))
    assert scene.outside.result(started.instance_id, timeout=1) == [1, 2]
    assert scene.outside.delivery(started.instance_id, "b-1").state == "CONSUMED"


def test_a_callback_right_after_dispatch_completes_the_effect(scene: Scene) -> None:
    """The participant accepted and calls back at once, between the worker's read of the inbox
    and its park until the callback's deadline (an hour): the effect completes now."""
    started = scene.outside.start("pay", key="p-1", input=50)

    def call_back() -> None:
        [effect] = scene.outside.detail(started.instance_id).effects
        scene.outside.complete_effect(effect.idempotency_key, applied=True, evidence={"ref": 7})

    asyncio.run(scene.work(ArriveAt("effect.before_suspend", call_back, key="p-1")))
    assert scene.outside.result(started.instance_id, timeout=1) == {"ref": 7}
    [effect] = scene.outside.detail(started.instance_id).effects
    assert effect.state is lf.EffectState.CONFIRMED


@pytest.mark.parametrize("workflow", ["one", "nap"])
def test_a_cancel_while_a_replayed_wait_or_timer_parks_again_is_honoured(
    scene: Scene, workflow: str
) -> None:
    """An event no wait takes wakes the instance, parked at a wait for ever ("one") or at a
    sleep of an hour ("nap"); replaying it, the worker has read no cancel request and parks
    again; the request lands between the two: it is honoured now, not after the timer or an
    event that may never come."""
    started = scene.outside.start(workflow, key="c-1")
    asyncio.run(scene.work())
    scene.outside.signal(started.instance_id, "unrelated", event_id="u-1")
    arrive = ArriveAt(
        "wait.before_suspend",
        lambda: scene.outside.cancel(started.instance_id, reason="customer asked"),
        key="c-1",
    )
    asyncio.run(scene.work(arrive))
    record = scene.record(started.instance_id)
    assert record.status is lf.InstanceStatus.CANCELLED
    assert record.cancel_outcome == "honoured"


def test_a_new_wait_refuses_to_start_after_a_cancel_request(scene: Scene) -> None:
    """The other side of the same moment: a wait not yet recorded when the request lands is
    never started (the store refuses its start), and the instance cancels at once."""
    started = scene.outside.start("two", key="n-1")
    scene.outside.signal(started.instance_id, "a", event_id="a-1", payload=1)
    arrive = ArriveAt(
        "wait.before_suspend",
        lambda: scene.outside.cancel(started.instance_id, reason="changed my mind"),
        key="n-1",
    )
    asyncio.run(scene.work(arrive))
    record = scene.record(started.instance_id)
    assert record.status is lf.InstanceStatus.CANCELLED
    # Only the wait that took "a" is journaled: the wait for "b" was never started.
    steps = scene.outside.detail(started.instance_id).steps
    assert [(s.name, s.status) for s in steps if s.seq > 0] == [("wait:a", lf.StepStatus.COMPLETED)]


backing_off = lf.Registry()
attempts: list[int] = []


def _unreachable() -> None:
    attempts.append(1)
    raise ConnectionError("the service is down")


@backing_off.workflow(name="flaky", version=1)
async def flaky(ctx: lf.WorkflowContext, _: None) -> None:
    hour = timedelta(hours=1)
    policy = lf.RetryPolicy(attempts_max=3, backoff_initial=hour, backoff_max=hour, jitter=False)
    await ctx.step("call", _unreachable, retry=policy)


def test_a_cancel_before_a_retry_back_off_release_is_seen_at_once(journal_url: str) -> None:
    """A step failed and its next attempt is an hour away: the worker releases the instance
    until then, decided from no cancel request; the request lands between that decision and
    the release. The release must leave the instance due at once (the arrival flag), so a
    worker takes it again now and reads the request; the step was started, so the request
    waits for its next attempt (what was started is finished) and stands meanwhile."""
    attempts.clear()
    outside = lf.SyncEngine(journal_url, backing_off)
    try:
        started = outside.start("flaky", key="r-1")
        arrive = ArriveAt(
            "instance.before_release",
            lambda: outside.cancel(started.instance_id, reason="no more tries"),
            key="r-1",
        )

        async def work() -> None:
            faults.install(arrive)
            try:
                async with lf.Engine(journal_url, backing_off) as engine:
                    worker = engine.worker(lease_seconds=30, poll_seconds=0.05)
                    await asyncio.wait_for(worker.run(until_nothing_due=True), timeout=60)
            finally:
                faults.install(None)

        asyncio.run(work())
        assert arrive.arrived == 1
        record = outside.get(started.instance_id)
        # Claimed once for the first attempt, once more at once because of the arrival.
        assert record.generation == 2
        assert record.cancel_requested_at is not None
        assert record.available_at is not None
        assert record.available_at > time.time() + 3000  # parked again until the attempt
        [step] = outside.detail(started.instance_id).steps
        assert step.status is lf.StepStatus.RETRY_SCHEDULED
        assert attempts == [1]
    finally:
        outside.close()
