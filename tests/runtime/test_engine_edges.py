"""What the engine tells a newcomer: a wait with no worker says so; records decode themselves.

Issue 15, item 1: with no worker running, ``engine.result`` waited and failed with LF401
without saying that a worker must run. Item 9: ``InstanceRecord.result`` and
``EffectRecord.evidence`` are ledger text the caller had to decode.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import ResultTimeoutError

registry = lf.Registry()
bank = registry.add_participant(lf.Participant("bank", deduplicates=True))


@bank.effect(classification="compensatable")
async def charge(call: lf.EffectCall) -> dict[str, Any]:
    return {"charged": call.payload["amount"], "receipt": "r-1"}


@registry.workflow(name="pay", version=1)
async def pay(ctx: lf.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    doubled = await ctx.step("double", lambda n: n * 2, request["amount"])
    receipt = await ctx.effect(charge, {"amount": doubled})
    if request.get("wait"):
        await ctx.wait_for("go")
    return {"receipt": receipt}


def test_a_wait_with_no_worker_says_a_worker_must_run(tmp_path: Path) -> None:
    """Goal: a result that does not come because nothing runs the instance says so.

    Method: start with no worker; Engine.result and SyncEngine.result with a short timeout:
    LF401 naming the worker (in-process and `ledgerflow worker`). With a worker running and
    the instance waiting for an event, the timeout does not claim that no worker runs.
    """
    url = f"sqlite:///{tmp_path / 'journal.db'}"

    async def without_worker() -> None:
        async with lf.Engine(url, registry) as engine:
            started = await engine.start("pay", key="k1", input={"amount": 2})
            with pytest.raises(ResultTimeoutError, match="no worker of this engine") as late:
                await engine.result(started.instance_id, timeout=0.05)
            assert late.value.code == "LF401"
            assert "ledgerflow worker" in str(late.value)

    asyncio.run(without_worker())
    with lf.SyncEngine(url, registry) as engine:
        instance_id = engine.start("pay", key="k1", input={"amount": 2}).instance_id
        with pytest.raises(ResultTimeoutError, match="worker drives it"):
            engine.result(instance_id, timeout=0.05)

    async def with_worker() -> None:
        async with lf.Engine(url, registry) as engine:
            worker = engine.worker(poll_seconds=0.01)
            running = asyncio.create_task(worker.run())
            started = await engine.start("pay", key="k2", input={"amount": 3, "wait": True})
            with pytest.raises(ResultTimeoutError) as late:
                await engine.result(started.instance_id, timeout=0.3)
            assert "no worker" not in str(late.value)
            worker.stop()
            await running

    asyncio.run(with_worker())


def test_records_decode_their_payloads(tmp_path: Path) -> None:
    """Goal: Python callers read decoded values from records, next to the ledger text.

    Method: run one instance; its record's result_value and input_value, its steps'
    output_value and its effect's evidence_value and payload_value are the values, while the
    text fields stay as they were.
    """
    url = f"sqlite:///{tmp_path / 'journal.db'}"

    async def run() -> lf.InstanceDetail:
        async with lf.Engine(url, registry) as engine:
            started = await engine.start("pay", key="k", input={"amount": 4})
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            return await engine.detail(started.instance_id)

    detail = asyncio.run(run())
    receipt = {"charged": 8, "receipt": "r-1"}
    assert detail.instance.result_value == {"receipt": receipt}
    assert isinstance(detail.instance.result, str)
    assert detail.instance.input_value == {"amount": 4}
    assert [s.output_value for s in detail.steps] == [8, receipt]
    (effect,) = detail.effects
    assert effect.evidence_value == receipt
    assert effect.payload_value == {"amount": 8}
