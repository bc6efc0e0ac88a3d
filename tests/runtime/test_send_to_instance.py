"""A workflow sends to another instance: ``ctx.signal_instance`` and ``ctx.start_workflow``.

Each send is one journal position (a SEND step) committed in the same transaction as the
event it delivers or the instance it starts; its event id is derived from the sender's
instance, run and position. A replay returns the recorded answer and sends nothing; a refusal
(no target, a key in use) is the step's recorded failure, raised again on replay. A crash
just before the send's commit leaves nothing; just after, the send is there once and the
next worker does not send it again. On a real SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from send_shop import registry

import ledgerflow as lf
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash
from processes import LEDGERFLOW, WAIT_SECONDS_MAX, child_environment

REGISTRY = registry


async def _work(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)


async def _finish(engine: lf.Engine, sender_id: str) -> Any:
    await engine.signal(sender_id, "later", event_id="later-1")
    await _work(engine)
    return await engine.result(sender_id, timeout=10)


def test_a_signal_and_a_start_are_sent_once_and_replayed_without_sending(
    journal_url: str,
) -> None:
    """Goal: start_workflow makes the target (detached: it ends on its own) and
    signal_instance delivers one event to it, under an id derived from the sender; when the
    sender is replayed after a wait, neither is sent again.

    Method: run the sender to its wait, wake it (a replay of both sends), finish; read the
    target's inbox and both journals."""

    async def main() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            started = await engine.start("sender", key="s-1", input={"to": "t-1", "note": 5})
            await _work(engine)
            answer = await _finish(engine, started.instance_id)
            target = answer["target"]
            assert answer["event_id"] == f"send:{started.instance_id}/r1/s2"
            assert await engine.result(target, timeout=5) == {
                "note": 5,
                "from": f"instance:{started.instance_id}",
            }
            [event] = (await engine.detail(target)).inbox
            assert event.event_id == answer["event_id"]
            steps = (await engine.detail(started.instance_id)).steps
            sends = [(s.kind, s.name, s.status) for s in steps if s.kind is StepKind.SEND]
            assert sends == [
                (StepKind.SEND, "start:inbox", StepStatus.COMPLETED),
                (StepKind.SEND, "signal:note", StepStatus.COMPLETED),
            ]
            assert len(await engine.list(workflow="inbox")) == 1

    asyncio.run(main())


def test_sends_from_parallel_branches_take_positions_in_call_order_and_replay(
    journal_url: str,
) -> None:
    """Goal: sends made from parallel branches (``ctx.gather``) take their positions in call
    order and are handed back in that order, and a replay after a wait sends none again.

    Method: a workflow starts three targets and signals each from a gather, then waits; wake
    it (a replay of all six sends) and read the journal and each target's inbox."""

    async def main() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            keys = ["g-1", "g-2", "g-3"]
            started = await engine.start("fan_out", key="f-1", input=keys)
            await _work(engine)
            targets = await _finish(engine, started.instance_id)
            steps = (await engine.detail(started.instance_id)).steps
            assert [(s.seq, s.name) for s in steps if s.kind is StepKind.SEND] == [
                (1, "start:inbox"), (2, "start:inbox"), (3, "start:inbox"),
                (4, "signal:note"), (5, "signal:note"), (6, "signal:note"),
            ]  # fmt: skip
            for key, target in zip(keys, targets, strict=True):
                assert await engine.result(target, timeout=5) == {
                    "note": key,
                    "from": f"instance:{started.instance_id}",
                }
                assert len((await engine.detail(target)).inbox) == 1

    asyncio.run(main())


def test_refusals_are_the_steps_recorded_failures_and_replay_the_same(journal_url: str) -> None:
    """Goal: a signal to no instance raises TargetNotFoundError and a start whose key holds
    another input raises KeyInUseError naming the holder; each is recorded as its step's
    failure (nothing delivered, nothing started) and raised again by the replay.

    Method: a workflow that catches both, then waits; wake it (replay) and read its result."""

    async def main() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            holder = await engine.start("inbox", key="taken", input="the first input")
            started = await engine.start("careful", key="c-1", input=None)
            await _work(engine)
            seen = await _finish(engine, started.instance_id)
            assert seen == ["missing wf_nobody", f"taken by {holder.instance_id}"]
            steps = (await engine.detail(started.instance_id)).steps
            assert [s.status for s in steps if s.kind is StepKind.SEND] == [StepStatus.FAILED] * 2
            assert (await engine.detail(holder.instance_id)).inbox == []
            assert (await engine.get(holder.instance_id)).input_value == "the first input"

    asyncio.run(main())


@pytest.mark.parametrize("point", ["send.before_commit", "send.after_commit"])
def test_a_crash_around_the_send_delivers_it_exactly_once(journal_url: str, point: str) -> None:
    """Goal: the sender's step and its delivery are one transaction: a worker that dies just
    before it leaves neither (the next worker sends it), one that dies just after leaves both
    (the next worker replays it and sends nothing).

    Method: a fault plan crashes the worker at the point of the signal (position 2); a new
    engine's worker takes the instance over once its lease lapses; count the target's events
    and what it received."""

    async def main() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            started = await engine.start("sender", key="s-2", input={"to": "t-2", "note": 9})
            faults.install(FaultPlan([FaultRule(point=point, action="crash", match={"seq": 2})]))
            try:
                with pytest.raises(SimulatedCrash):
                    await _work(engine)
            finally:
                faults.install(None)
            sent = [
                s.seq
                for s in (await engine.detail(started.instance_id)).steps
                if s.kind is StepKind.SEND
            ]
            assert sent == ([1] if point == "send.before_commit" else [1, 2])
        async with lf.Engine(journal_url, REGISTRY) as engine:
            await _work(engine)
            answer = await _finish(engine, started.instance_id)
            inbox = (await engine.detail(answer["target"])).inbox
            assert [e.event_id for e in inbox] == [f"send:{started.instance_id}/r1/s2"]
            assert (await engine.result(answer["target"], timeout=5))["note"] == 9

    asyncio.run(main())


def test_a_send_reaches_only_an_instance_of_the_senders_tenant(journal_url: str) -> None:
    """Goal: a workflow cannot signal another tenant's instance by its id: for it, there is
    no such instance (TargetNotFoundError), and nothing reaches the other tenant's inbox.

    Method: an inbox instance of tenant "b"; a workflow of tenant "a" signals its id."""

    async def main() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            other = await engine.start("inbox", key="b-1", input=None, tenant="b")
            nosy = await engine.start("nosy", key="a-1", input=other.instance_id, tenant="a")
            await _work(engine)
            assert await engine.result(nosy.instance_id) == f"missing {other.instance_id}"
            assert (await engine.detail(other.instance_id)).inbox == []

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize("point", ["send.before_commit", "send.after_commit"])
def test_a_worker_process_killed_around_the_send_delivers_it_exactly_once(
    journal_url: str, point: str
) -> None:
    """Goal: the same as above with a real death: a ``ledgerflow worker`` process SIGKILLs
    itself at the send's fault point (no cleanup, no finally); a fresh worker recovers, and
    the target's inbox holds the event once.

    Method: start the sender, run a worker process with the fault plan in its environment
    until it dies, recover in this process, count the target's events."""

    async def start() -> str:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            started = await engine.start("sender", key="s-3", input={"to": "t-3", "note": 4})
        return started.instance_id

    sender = asyncio.run(start())
    plan = [{"point": point, "action": "kill", "match": {"seq": 2}}]
    env = child_environment(Path(__file__).parent, LEDGERFLOW_FAULTS=json.dumps(plan))
    worker = [*LEDGERFLOW, "worker", "send_shop:registry", "--db", journal_url, "--until-idle"]
    arguments = ["--lease-seconds", "0.5", "--poll-seconds", "0.02"]
    died = subprocess.run(
        [*worker, *arguments], env=env, timeout=WAIT_SECONDS_MAX, capture_output=True, check=False
    )
    assert died.returncode == -signal.SIGKILL, died.stderr

    async def recover() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            await _work(engine)
            answer = await _finish(engine, sender)
            inbox = (await engine.detail(answer["target"])).inbox
            assert [e.event_id for e in inbox] == [f"send:{sender}/r1/s2"]
            assert (await engine.result(answer["target"], timeout=5))["note"] == 4

    asyncio.run(recover())


def test_a_cancelled_sender_sends_nothing_new(journal_url: str) -> None:
    """Goal: a send is new work: once a cancel request stands, the sender starts no instance
    and delivers no event (its commit is held to there being no request, as an effect's is).

    Method: cancel the sender before any worker took it; run a worker."""

    async def main() -> None:
        async with lf.Engine(journal_url, REGISTRY) as engine:
            started = await engine.start("sender", key="s-4", input={"to": "t-4", "note": 1})
            await engine.cancel(started.instance_id, reason="changed my mind")
            await _work(engine)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.CANCELLED
            assert await engine.list(workflow="inbox") == []

    asyncio.run(main())
