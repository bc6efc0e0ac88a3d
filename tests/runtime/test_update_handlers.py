"""Declared update handlers (``ctx.on_update``) answered at whichever wait the workflow is in.

Every test runs on both backends (``journal_url``). The workflow waits for something else (an
event, a timer); updates sent meanwhile are answered by the handler, and the wait still ends
as it would have: by its event, or by its timer. The replay checker accepts the histories.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.errors import UpdateRejectedError
from ledgerflow.ledger.values import Published
from ledgerflow.model.step import StepKind
from ledgerflow.runtime.history import history_document
from ledgerflow.testing import FakeClock, replay_history


def _double(x: int) -> int:
    return 2 * x


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="tally", version=1)
    async def tally(ctx: lf.WorkflowContext, start: int) -> dict[str, Any]:
        totals = [start]

        async def add(amount: int) -> int:
            if amount == 13:
                raise ValueError("unlucky")
            totals.append(await ctx.step("double", _double, amount))
            return sum(totals)

        ctx.on_update("add", add)
        go = await ctx.wait_for("go")
        await ctx.sleep(3600)
        return {"total": sum(totals), "go": go.payload}

    @registry.update_validator("tally", "add")
    def positive(amount: Any) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError("add takes a positive amount")

    return registry


@contextlib.asynccontextmanager
async def _working(engine: lf.Engine) -> AsyncIterator[None]:
    worker = asyncio.create_task(engine.worker(lease_seconds=5, poll_seconds=0.01).run())
    try:
        yield
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker


async def _waiting(engine: lf.Engine, iid: str, *, steps: int = 0) -> bool:
    """Whether the instance is WAITING with at least ``steps`` journal positions."""
    found = await engine.detail(iid)
    return found.instance.status is lf.InstanceStatus.WAITING and len(found.steps) >= steps


def test_an_update_is_answered_while_the_workflow_waits_for_an_event(journal_url: str) -> None:
    """Goal: updates sent while the workflow waits for "go" are answered by the declared
    handler (its step journaled under the wait), a failing handler's update is refused and the
    workflow goes on, a repeated update_id gets its first reply, and "go" is still taken by
    the wait afterwards; the journal replays clean in the replay checker."""
    registry = _registry()
    clock = FakeClock(autojump=False)

    async def main() -> dict[str, Any]:
        async with lf.Engine(journal_url, registry, clock=clock) as engine:
            iid = str((await engine.start("tally", key="t-1", input=1)).instance_id)
            async with _working(engine):
                await until(lambda: _waiting(engine, iid), what="waiting")
                assert await engine.update(iid, "add", 5, update_id="u-1", timeout=10) == 11
                assert await engine.update(iid, "add", 2, update_id="u-2", timeout=10) == 15
                with pytest.raises(UpdateRejectedError, match="unlucky"):
                    await engine.update(iid, "add", 13, update_id="u-3", timeout=10)
                with pytest.raises(UpdateRejectedError, match="positive"):
                    await engine.update(iid, "add", -1, update_id="u-4", timeout=10)
                assert await engine.update(iid, "add", 99, update_id="u-1", timeout=10) == 11
                await engine.signal(iid, "go", payload="now", event_id="go-1")
                await until(lambda: _waiting(engine, iid, steps=10), what="the sleep after go")
                clock.advance(3601)
                assert await engine.result(iid, timeout=10) == {"total": 15, "go": "now"}
            detail = await engine.detail(iid)
            kinds = [(s.kind, s.name) for s in detail.steps]
            assert kinds == [
                (StepKind.WAIT, "wait:go"),
                (StepKind.MARKER, "take:update:add"),
                (StepKind.LOCAL, "double"),
                (StepKind.MARKER, "publish:update:u-1"),
                (StepKind.MARKER, "take:update:add"),
                (StepKind.LOCAL, "double"),
                (StepKind.MARKER, "publish:update:u-2"),
                (StepKind.MARKER, "take:update:add"),
                (StepKind.MARKER, "publish:update:u-3"),
                (StepKind.TIMER, "sleep"),
            ]
            requests = [d for d in detail.inbox if d.name == "update:add"]
            assert [(d.event_id, d.consumed_seq) for d in requests] == [
                ("update:u-1", 2),
                ("update:u-2", 5),
                ("update:u-3", 8),
            ]
            return history_document(detail)

    document = asyncio.run(main())
    verdict = replay_history(registry, document)
    assert verdict.compatible, verdict


def test_an_update_is_answered_during_a_durable_sleep_and_the_timer_still_ends_it(
    journal_url: str,
) -> None:
    """Goal: an update sent while the workflow sleeps on a durable timer (fake clock) is
    answered at once, the sleep is not cut short by it (still WAITING until the clock passes
    the timer), and the workflow then ends with the handler's change in its state."""
    registry = lf.Registry()

    @registry.workflow(name="napper", version=1)
    async def napper(ctx: lf.WorkflowContext, _: None) -> list[str]:
        notes: list[str] = []
        ctx.on_update("note", lambda text: notes.append(text) or len(notes))
        await ctx.sleep(3600)
        return notes

    clock = FakeClock(autojump=False)

    async def main() -> dict[str, Any]:
        async with lf.Engine(journal_url, registry, clock=clock) as engine:
            iid = str((await engine.start("napper", key="n-1")).instance_id)
            async with _working(engine):
                await until(lambda: _waiting(engine, iid), what="asleep")
                assert await engine.update(iid, "note", "a", update_id="n-a", timeout=10) == 1
                assert await engine.update(iid, "note", "b", update_id="n-b", timeout=10) == 2
                await until(lambda: _waiting(engine, iid, steps=5), what="asleep again")
                clock.advance(3601)
                assert await engine.result(iid, timeout=10) == ["a", "b"]
            reply = await engine.read(iid, "update:n-b")
            assert isinstance(reply, Published)
            assert reply.value == {"reply": 2}
            return history_document(await engine.detail(iid))

    document = asyncio.run(main())
    assert replay_history(registry, document).compatible


def test_a_caller_in_the_workers_process_is_woken_by_the_commit_not_the_poll(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: with the store's poll made longer than the callers' timeouts, ``engine.update``
    and ``wait_published`` still return: the commit of the engine's own worker that publishes
    the value rings the doorbell (runtime/doorbell.py). Without it both would read the store
    again only at their deadline."""
    monkeypatch.setattr(lf.limits, "VALUE_POLL_SECONDS", 60.0)
    registry = lf.Registry()

    @registry.workflow(name="shown", version=1)
    async def shown(ctx: lf.WorkflowContext, _: None) -> None:
        ctx.on_update("show", lambda text: ctx.publish("shown", text) or text)
        await ctx.wait_for("close")

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            iid = str((await engine.start("shown", key="s-1")).instance_id)
            async with _working(engine):
                await until(lambda: _waiting(engine, iid), what="waiting")
                began = time.monotonic()
                watching = asyncio.create_task(engine.wait_published(iid, "shown", timeout=6))
                await asyncio.sleep(0)  # the watcher reads (nothing yet) and listens
                assert await engine.update(iid, "show", "hi", update_id="s-a", timeout=6) == "hi"
                assert (await watching).value == "hi"
                # A poll-only caller reads again only at its deadline (6 s here).
                assert time.monotonic() - began < 3.0

    asyncio.run(main())


def test_a_cancel_that_wins_while_the_handler_runs_refuses_the_update(journal_url: str) -> None:
    """Goal: a cancel request accepted while a handler runs stops it before its next effect
    (a local step in flight finishes, as anywhere); the instance ends CANCELLED, and the
    caller is told the update was taken but not answered (UpdateRejectedError at once, not a
    timeout)."""
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))
    cancelled: list[str] = []

    @stock.effect(classification="reversible", compensation="release")
    async def reserve(call: lf.EffectCall) -> Any:
        return {"reserved": call.payload}

    @stock.compensation("release")
    async def release(call: lf.EffectCall) -> Any:
        return {}

    def ask_cancel(iid: str) -> str:
        # From outside the worker, as an operator would (a store of its own).
        with lf.SyncEngine(journal_url, lf.Registry()) as outside:
            outside.request_cancel(iid, reason="while the handler runs")
        cancelled.append(iid)
        return iid

    @registry.workflow(name="stopped", version=1)
    async def stopped(ctx: lf.WorkflowContext, _: None) -> None:
        async def handle(_: Any) -> str:
            await ctx.step("cancel from outside", ask_cancel, str(ctx.instance_id))
            return str(await ctx.effect(reserve, 1))  # refused: the cancel stands

        ctx.on_update("go", handle)
        await ctx.wait_for("close")

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            iid = str((await engine.start("stopped", key="c-1")).instance_id)
            async with _working(engine):
                await until(lambda: _waiting(engine, iid), what="waiting")
                with pytest.raises(UpdateRejectedError, match="taken but not answered"):
                    await engine.update(iid, "go", None, update_id="g-1", timeout=20)
            assert cancelled == [iid]
            detail = await engine.detail(iid)
            assert detail.instance.status is lf.InstanceStatus.CANCELLED
            assert "stock.reserve" not in [s.name for s in detail.steps]
            wait = detail.steps[0]
            assert (wait.name, wait.status) == ("wait:close", lf.StepStatus.FAILED)

    asyncio.run(main())


def test_an_update_sent_while_steps_run_is_handled_at_the_next_wait_and_replays(
    journal_url: str,
) -> None:
    """Goal: an update stored before the workflow reaches any wait (here: before it first ran)
    is handled at its next wait, under that wait's position; an in-flight history with the
    wait still open replays clean up to it, and code that no longer declares the handler is
    told the journal holds an update it does not handle (a divergence at the take)."""
    registry = lf.Registry()

    @registry.workflow(name="later", version=1)
    async def later(ctx: lf.WorkflowContext, _: None) -> None:
        await ctx.step("first", _double, 1)
        ctx.on_update("add", lambda amount: amount + 1)
        await ctx.wait_for("close")

    undeclared = lf.Registry()

    @undeclared.workflow(name="later", version=1)
    async def later_without(ctx: lf.WorkflowContext, _: None) -> None:
        await ctx.step("first", _double, 1)
        await ctx.wait_for("close")

    async def main() -> dict[str, Any]:
        async with lf.Engine(journal_url, registry) as engine:
            iid = str((await engine.start("later", key="l-1")).instance_id)
            asking = asyncio.create_task(engine.update(iid, "add", 1, update_id="l-a"))
            async with _working(engine):
                assert await asking == 2
                await until(lambda: _waiting(engine, iid, steps=4), what="waiting again")
            detail = await engine.detail(iid)
            assert [s.name for s in detail.steps] == [
                "first",
                "wait:close",
                "take:update:add",
                "publish:update:l-a",
            ]
            return history_document(detail)

    document = asyncio.run(main())
    assert replay_history(registry, document).compatible
    verdict = replay_history(undeclared, document)
    assert not verdict.compatible
    assert verdict.position == 3, verdict
