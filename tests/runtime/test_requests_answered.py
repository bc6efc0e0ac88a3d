"""Every accepted cancel request and every accepted event ends with an outcome the caller can
read back: never dropped silently.

The rule for a cancel request (docs/state-machines.md): the instance stops before its next
step; a request that arrives while the workflow's last step runs is overtaken by the completion
already on its way, and the ledger says so (``cancel_outcome``). The rule for an event: it is
taken by a wait, or, if the instance ends before any wait takes it, refused then with the
reason, readable by its event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

from click.testing import CliRunner

import ledgerflow as lf
from conditions import until
from ledgerflow.cli.main import cli
from ledgerflow.errors import WaitTimeoutError


class Gate:
    """A local step that reports it started and waits until the test opens it."""

    def __init__(self) -> None:
        self.started = 0
        self.opened = asyncio.Event()

    async def __call__(self) -> str:
        self.started += 1
        await self.opened.wait()
        return "passed"


def _registry(gate: Gate) -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="last-step", version=1)
    async def last_step(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.step("first", lambda: 1)
        await ctx.step("gate", gate)
        return "done"

    @registry.workflow(name="two-steps", version=1)
    async def two_steps(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.step("gate", gate)
        await ctx.step("after", lambda: 2)
        return "done"

    @registry.workflow(name="timed-out", version=1)
    async def timed_out(ctx: lf.WorkflowContext, _: None) -> str:
        with contextlib.suppress(WaitTimeoutError):
            await ctx.wait_for("approve", timeout=0.2)
        await ctx.step("gate", gate)
        return "done"

    return registry


async def _with_worker(
    url: str,
    registry: lf.Registry,
    body: Callable[[lf.Engine], Awaitable[None]],
    *,
    lease_seconds: float = 2.0,
) -> None:
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(lease_seconds=lease_seconds, poll_seconds=0.02)
        running = asyncio.create_task(worker.run())
        try:
            await body(engine)
        finally:
            worker.stop()
            await running


def test_a_cancel_during_the_last_step_is_overtaken_and_says_so(journal_url: str) -> None:
    """Goal: a cancel request accepted while the last step runs is not dropped silently.

    Method: the request is made while the workflow's last step waits on its gate; it is
    accepted (recorded). The gate opens, the workflow returns: the instance ends SUCCEEDED (a
    completion on its way wins), ``cancel_outcome`` is "overtaken", and the timeline records the
    request and what became of it.
    """
    gate = Gate()

    async def body(engine: lf.Engine) -> None:
        started = await engine.start("last-step", key="k")
        await until(lambda: gate.started, what="the last step to start")
        asked = await engine.cancel(started.instance_id, reason="customer changed their mind")
        assert asked.cancel_requested_at is not None
        gate.opened.set()
        assert await engine.result(started.instance_id, timeout=30) == "done"
        record = await engine.get(started.instance_id)
        assert (record.status, record.cancel_outcome) == (lf.InstanceStatus.SUCCEEDED, "overtaken")
        timeline = [
            (e.subject, e.from_state, e.to_state)
            for e in (await engine.detail(started.instance_id)).timeline
            if e.subject == "cancel"
        ]
        assert timeline == [("cancel", None, "requested"), ("cancel", "requested", "overtaken")]

    asyncio.run(_with_worker(journal_url, _registry(gate), body))


def test_a_cancel_before_the_next_step_is_honoured_and_says_so(journal_url: str) -> None:
    """Goal: the other side of the rule: a request made while a step that is not the last runs
    stops the instance before its next step; CANCELLED, ``cancel_outcome`` "honoured"."""
    gate = Gate()

    async def body(engine: lf.Engine) -> None:
        started = await engine.start("two-steps", key="k")
        await until(lambda: gate.started, what="the first step to start")
        await engine.cancel(started.instance_id, reason="stop")
        gate.opened.set()
        record = await engine.wait(started.instance_id, timeout=30)
        assert (record.status, record.cancel_outcome) == (lf.InstanceStatus.CANCELLED, "honoured")
        assert record.cause == "cancel requested: stop"

    asyncio.run(_with_worker(journal_url, _registry(gate), body))


def test_an_event_after_its_wait_timed_out_is_refused_when_the_instance_ends(
    journal_url: str,
) -> None:
    """Goal: an event told "accepted" is either taken by a wait or refused with a reason the
    sender can read back by event id; never left PENDING after the instance ended.

    Method: the workflow waits 0.2 s for "approve", times out, and runs a step that waits on a
    gate. "approve" is sent then: accepted (the instance runs, the event is kept). The gate
    opens and the instance ends SUCCEEDED. The event is then REJECTED (refusal "ended", reason
    naming SUCCEEDED), read back three ways: ``engine.delivery``, a repeated ``engine.signal``
    (a duplicate that now reports the refusal) and ``ledgerflow signal`` (exit 1, refused).
    """
    gate = Gate()
    state: dict[str, str] = {}

    async def body(engine: lf.Engine) -> None:
        started = await engine.start("timed-out", key="k")
        await until(lambda: gate.started, what="the wait to time out and the step to start")
        sent = await engine.signal(started.instance_id, "approve", event_id="x")
        assert sent.outcome is lf.DeliveryOutcome.ACCEPTED
        gate.opened.set()
        assert await engine.result(started.instance_id, timeout=30) == "done"
        kept = await engine.delivery(started.instance_id, "x")
        assert (kept.state, kept.refusal) == ("REJECTED", "ended")
        assert kept.reason == "the instance ended SUCCEEDED before a wait took it"
        again = await engine.signal(started.instance_id, "approve", event_id="x")
        assert again.outcome is lf.DeliveryOutcome.DUPLICATE
        assert again.delivery.state == "REJECTED"
        state["instance_id"] = started.instance_id

    asyncio.run(_with_worker(journal_url, _registry(gate), body))
    answer = CliRunner().invoke(
        cli,
        [
            "signal",
            state["instance_id"],
            "approve",
            "--event-id",
            "x",
            "--json",
            "--db",
            journal_url,
        ],
    )
    assert answer.exit_code == 1, answer.output
    body = json.loads(answer.output)
    assert (body["outcome"], body["state"]) == ("duplicate", "REJECTED")
    assert "ended SUCCEEDED" in body["reason"]


def test_a_cancel_from_another_process_stops_the_next_effect(journal_url: str) -> None:
    """Goal: after ``cancel()`` returns, no new effect of the instance is dispatched, even by a
    worker in another process that has not read the request yet.

    Method: the request comes from a second engine on the same journal (another connection,
    as another process), while the worker's first step waits on its gate; the gate opens at
    once, so the worker reaches its next step, an effect, before any heartbeat could read the
    request (a 30 s lease: the first heartbeat reads requests after 10 s). The store refuses
    the effect's intent: nothing is dispatched, the instance ends
    CANCELLED with ``cancel_outcome`` "honoured", and the reason names the effect that did not
    start.
    """
    gate = Gate()
    dispatched: list[str] = []
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank", deduplicates=True))

    @bank.effect(classification="compensatable", compensation="refund")
    async def charge(call: lf.EffectCall) -> dict[str, str]:
        dispatched.append(call.idempotency_key)
        return {"charged": call.idempotency_key}

    @bank.compensation("refund")
    async def refund(call: lf.EffectCall) -> dict[str, str]:
        dispatched.append(call.idempotency_key)
        return {"refunded": call.idempotency_key}

    @registry.workflow(name="charge-after-gate", version=1)
    async def charge_after_gate(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.step("gate", gate)
        await ctx.effect(charge, {"amount": 5})
        return "charged"

    async def body(engine: lf.Engine) -> None:
        started = await engine.start("charge-after-gate", key="k")
        await until(lambda: gate.started, what="the first step to start")
        with lf.SyncEngine(journal_url, lf.Registry()) as elsewhere:
            elsewhere.cancel(started.instance_id, reason="fraud")
        gate.opened.set()
        record = await engine.wait(started.instance_id, timeout=30)
        assert (record.status, record.cancel_outcome) == (lf.InstanceStatus.CANCELLED, "honoured")
        assert "step 2 (bank.charge) was not started" in (record.reason or "")
        assert dispatched == []

    asyncio.run(_with_worker(journal_url, registry, body, lease_seconds=30.0))
