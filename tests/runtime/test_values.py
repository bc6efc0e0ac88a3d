"""Values a workflow publishes (``ctx.publish``) and updates it answers (``engine.update``).

Every test runs on both backends (``journal_url``). Reads go to the store alone: the readers
here are engines with no worker. Crashes are real in-process worker deaths at named points.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.errors import ReservedNameError, ResultTimeoutError, UpdateRejectedError
from ledgerflow.ledger.values import NotPublished, Published
from ledgerflow.model import ids as lf_ids
from ledgerflow.model.ids import RunNumber
from ledgerflow.model.step import StepKind
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash


def _double(x: int) -> int:
    return 2 * x


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="stages", version=1)
    async def stages(ctx: lf.WorkflowContext, n: int) -> int:
        ctx.publish("stage", "priced")
        doubled = await ctx.step("double", _double, n)
        ctx.publish("stage", {"doubled": doubled})
        await ctx.wait_for("go")
        return int(doubled)

    return registry


async def _work(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)


def test_values_are_versioned_read_from_the_store_and_kept_after_the_end(journal_url: str) -> None:
    """Goal: two publications of one name are versions 1 and 2, read by an engine with no
    worker; a name never published is NotPublished (not None); the value stays after the
    instance ends; wait_published(after_version=) answers only a newer version, else times
    out."""

    async def main() -> None:
        async with lf.Engine(journal_url, _registry()) as engine:
            started = await engine.start("stages", key="s-1", input=21)
            iid = str(started.instance_id)
            assert isinstance(await engine.read(iid, "stage"), NotPublished)
            await _work(engine)
        async with lf.Engine(journal_url, lf.Registry()) as reader:  # no worker, no code
            found = await reader.read(iid, "stage")
            assert isinstance(found, Published)
            assert (found.value, found.version, found.run) == ({"doubled": 42}, 2, 1)
            missing = await reader.read(iid, "other")
            assert missing == NotPublished(instance_id=started.instance_id, name="other")
            assert (await reader.wait_published(iid, "stage", after_version=1)).version == 2
            with pytest.raises(ResultTimeoutError):
                await reader.wait_published(iid, "stage", after_version=2, timeout=0.2)
        async with lf.Engine(journal_url, _registry()) as engine:
            await engine.signal(iid, "go", event_id="go-1")
            await _work(engine)
            assert await engine.result(iid, timeout=5) == 42
            kept = await engine.read(iid, "stage")
            assert isinstance(kept, Published)
            assert kept.version == 2

    asyncio.run(main())


def test_a_crash_before_the_publishing_step_commits_never_shows_the_value(
    journal_url: str,
) -> None:
    """Goal: the worker dies after the step that follows the second publication ran and
    before its commit: a reader sees version 1 only; after recovery the value is there once
    (version 2, not 3)."""

    async def main() -> None:
        async with lf.Engine(journal_url, _registry()) as engine:
            started = await engine.start("stages", key="s-2", input=5)
            iid = str(started.instance_id)
            faults.install(FaultPlan([FaultRule(point="step.after_execute", action="crash")]))
            try:
                with pytest.raises(SimulatedCrash):
                    await _work(engine)
            finally:
                faults.install(None)
        async with lf.Engine(journal_url, lf.Registry()) as reader:
            assert isinstance(await reader.read(iid, "stage"), NotPublished)
        async with lf.Engine(journal_url, _registry()) as engine:
            await _work(engine)
            found = await engine.read(iid, "stage")
            assert isinstance(found, Published)
            assert (found.value, found.version) == ({"doubled": 10}, 2)
            steps = (await engine.detail(iid)).steps
            markers = [s for s in steps if s.kind is StepKind.MARKER]
            assert [m.name for m in markers] == ["publish:stage", "publish:stage"]

    asyncio.run(main())


def _adder() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="adder", version=1)
    async def adder(ctx: lf.WorkflowContext, state: dict[str, int]) -> int:
        total, handled = state["total"], 0
        while handled < state["each"]:
            handled += await ctx.handle_updates("add", lambda amount: total + amount)
        if ctx.run < state["runs"]:
            ctx.continue_as_new({**state, "total": total + 1})
        stop = await ctx.wait_for("stop")
        return int(stop.payload)

    @registry.update_validator("adder", "add")
    def positive(amount: Any) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError("add takes a positive amount")

    return registry


async def _update_while_working(engine: lf.Engine, iid: str, payload: Any, update_id: str) -> Any:
    worker = asyncio.create_task(
        engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=False)
    )
    try:
        return await engine.update(iid, "add", payload, update_id=update_id, timeout=10)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker


def test_an_update_is_answered_and_its_id_deduplicated_across_continue_as_new(
    journal_url: str,
) -> None:
    """Goal: an update sent before the workflow's wait opened is handled by it and its reply
    returned; the same update_id after a continue-as-new stores nothing and returns the
    first reply; a refused update leaves no trace in the inbox or the journal."""

    async def main() -> None:
        async with lf.Engine(journal_url, _adder()) as engine:
            started = await engine.start(
                "adder", key="a-1", input={"total": 100, "each": 1, "runs": 2}
            )
            iid = str(started.instance_id)
            with pytest.raises(UpdateRejectedError):
                await engine.update(iid, "add", -3, update_id="bad")
            assert engine.store.inbox(started.instance_id) == []
            first = await _update_while_working(engine, iid, 5, "u-1")
            assert first == 105
            await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)
            assert (await engine.get(iid)).run == 2
            again = await engine.update(iid, "add", 5, update_id="u-1", timeout=1)
            assert again == 105
            requests = [
                d for d in engine.store.inbox(started.instance_id) if d.name == "update:add"
            ]
            assert len(requests) == 1
            second = await _update_while_working(engine, iid, 7, "u-2")
            assert second == 108
            reply = await engine.read(iid, "update:u-1")
            assert isinstance(reply, Published)
            assert reply.run == 1

    asyncio.run(main())


def test_update_with_start_starts_and_answers_in_one_call(journal_url: str) -> None:
    """Goal: update_with_start creates the instance and its request together; repeated with
    the same update_id it finds the instance and returns the first reply; a signal may not
    forge an update's name."""

    async def main() -> None:
        async with lf.Engine(journal_url, _adder()) as engine:
            worker = asyncio.create_task(
                engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=False)
            )
            try:
                state = {"total": 1, "each": 1, "runs": 1}
                answer = await engine.update_with_start(
                    "adder", key="w-1", input=state, update="add", update_id="w", payload=2,
                    timeout=10,
                )  # fmt: skip
                assert answer.started.created
                assert answer.reply == 3
                repeat = await engine.update_with_start(
                    "adder", key="w-1", input=state, update="add", update_id="w", payload=2,
                    timeout=10,
                )  # fmt: skip
                assert (repeat.instance_id, repeat.started.created) == (answer.instance_id, False)
                assert repeat.reply == 3
                with pytest.raises(ReservedNameError):
                    await engine.signal(str(answer.instance_id), "update:add", event_id="x")
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    asyncio.run(main())


def test_a_replay_that_would_publish_another_value_parks_and_keeps_the_recorded_one(
    journal_url: str,
) -> None:
    """Goal: code changed under a waiting instance now publishes another value at the
    publication's position: the instance parks as a divergence and the value shown is the
    recorded one, at its version."""

    def stages(shown: str) -> lf.Registry:
        registry = lf.Registry()

        @registry.workflow(name="stages", version=1)
        async def flow(ctx: lf.WorkflowContext, n: int) -> int:
            ctx.publish("stage", shown)
            await ctx.wait_for("go")
            return n

        return registry

    async def main() -> None:
        async with lf.Engine(journal_url, stages("old")) as engine:
            iid = str((await engine.start("stages", key="d-1", input=1)).instance_id)
            await _work(engine)
        registry = stages("new")
        # The same fingerprint (the version's code changed without a new version).
        old = engine.registry.get("stages", 1).fingerprint
        object.__setattr__(registry.get("stages", 1), "fingerprint", old)
        async with lf.Engine(journal_url, registry) as engine:
            await engine.signal(iid, "go", event_id="go-1")
            await _work(engine)
            record = await engine.get(iid)
            assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION, record.reason
            assert record.reason_code == "replay_divergence"
            found = await engine.read(iid, "stage")
            assert isinstance(found, Published)
            assert (found.value, found.version) == ("old", 1)

    asyncio.run(main())


def test_an_update_stored_before_the_instance_first_ran_is_taken_by_its_wait(
    journal_url: str,
) -> None:
    """Goal: the request is in the inbox before the workflow's code ever ran (no worker
    yet): the wait opened later takes it, and the caller waiting all along gets the reply;
    values published in run 1 are still read in run 2."""

    async def main() -> None:
        async with lf.Engine(journal_url, _adder()) as engine:
            started = await engine.start(
                "adder", key="p-1", input={"total": 10, "each": 1, "runs": 2}
            )
            iid = str(started.instance_id)
            asking = asyncio.create_task(engine.update(iid, "add", 1, update_id="early"))
            await until(lambda: engine.store.inbox(started.instance_id), what="the request stored")
            assert engine.store.journal(started.instance_id, RunNumber(1)).steps == {}
            worker = asyncio.create_task(
                engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=False)
            )
            try:
                assert await asyncio.wait_for(asking, timeout=10) == 11
                await until(
                    lambda: engine.store.get_instance(started.instance_id).run == 2,  # type: ignore[union-attr]
                    what="run 2",
                )
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
            reply = await engine.read(iid, "update:early")
            assert isinstance(reply, Published)
            assert (reply.value, reply.run) == ({"reply": 11}, 1)

    asyncio.run(main())


def test_a_failing_handler_and_an_instance_that_ended_first_refuse_the_update(
    journal_url: str,
) -> None:
    """Goal: a handler out of attempts publishes its failure, raised to every caller of that
    update_id as UpdateRejectedError; a request the instance never took before it ended is
    refused (the inbox keeps it refused) and its waiting caller is told, not left to time
    out; a request to an ended instance is refused at once."""
    registry = lf.Registry()
    once = lf.RetryPolicy(attempts_max=1)

    def broken(amount: int) -> int:
        raise RuntimeError(f"cannot add {amount}")

    @registry.workflow(name="fragile", version=1, step_retry=once)
    async def fragile(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.handle_updates("add", broken)
        await ctx.wait_for("stop")
        return "stopped"

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            iid = str((await engine.start("fragile", key="f-1", input=None)).instance_id)
            worker = asyncio.create_task(
                engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=False)
            )
            try:
                with pytest.raises(UpdateRejectedError, match="cannot add 3"):
                    await engine.update(iid, "add", 3, update_id="x-1", timeout=10)
                with pytest.raises(UpdateRejectedError, match="cannot add 3"):
                    await engine.update(iid, "add", 3, update_id="x-1", timeout=1)
                late = asyncio.create_task(engine.update(iid, "add", 4, update_id="x-2"))
                await until(
                    lambda: engine.store.delivery(started_id(iid), "update:x-2"),
                    what="the second request stored",
                )
                await engine.signal(iid, "stop", event_id="stop-1")
                with pytest.raises(UpdateRejectedError, match="ended first"):
                    await asyncio.wait_for(late, timeout=10)
                with pytest.raises(UpdateRejectedError, match="after the instance ended"):
                    await engine.update(iid, "add", 5, update_id="x-3", timeout=1)
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
            assert await engine.result(iid, timeout=5) == "stopped"

    asyncio.run(main())


def started_id(iid: str) -> lf_ids.InstanceId:
    return lf_ids.InstanceId(iid)
