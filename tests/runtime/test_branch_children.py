"""Children's results and asynchronous effects awaited inside parallel branches (issue 26).

Each is a call in the run's order: the parent parks WAITING once every branch is blocked (one
commit for all the held waits), wakes for each child's ending, callback or signal, hands the
values back in the order the code called, and replays the same whatever order they came in.
The children wait for a signal each, so a test decides the order they finish in. Every test
runs on a real SQLite file and on PostgreSQL when one is configured (``journal_url``), with a
fresh engine and worker for each phase (a restart: each resumption replays the journal).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ledgerflow as lf
from ledgerflow.errors import ChildFailedError
from ledgerflow.ledger.records import Commit, InstanceWrite
from ledgerflow.ledger.transaction import Transaction
from ledgerflow.operators.service import Operations


class Nope(lf.BusinessFailure):
    """A child's declared failure."""


class Family:
    def __init__(self) -> None:
        self.registry = registry = lf.Registry()
        wire = registry.add_participant(lf.Participant("wire", deduplicates=True))
        self.accepted: list[str] = []
        self.undone: list[str] = []

        @wire.effect(classification="forward-recovery-only", completes_by_callback=3600)
        async def transfer(call: lf.EffectCall) -> dict[str, Any]:
            self.accepted.append(call.idempotency_key)
            return {"accepted": call.idempotency_key}

        @registry.workflow(name="echo", version=1, business_failures=(Nope,))
        async def echo(ctx: lf.WorkflowContext, n: int) -> dict[str, Any]:
            go = await ctx.wait_for("go")
            if go.payload == "fail":
                raise Nope(f"child {n} was told to fail")
            return {"n": n, "go": go.payload}

        @registry.workflow(name="three", version=1)
        async def three(ctx: lf.WorkflowContext, _: Any) -> list[Any]:
            async def branch(n: int) -> str:
                got = await ctx.child(echo, n)
                # Taken after the child's result: the same position whatever ended first.
                return str(await ctx.step("after", str, got["n"]))

            return list(await asyncio.gather(*(branch(n) for n in range(3))))

        @registry.workflow(name="handles", version=1)
        async def handles(ctx: lf.WorkflowContext, _: Any) -> list[Any]:
            async def branch(n: int) -> Any:
                handle = await ctx.start_child(echo, n)
                return (await handle.result())["n"]

            return await ctx.gather(*(branch(n) for n in range(3)))

        @registry.workflow(name="mixed", version=1)
        async def mixed(ctx: lf.WorkflowContext, _: Any) -> list[Any]:
            child, wired, signal = await asyncio.gather(
                ctx.child(echo, 7), ctx.effect(transfer, {"to": "x"}), ctx.wait_for("ok")
            )
            return [child["go"], wired, signal.payload, await ctx.step("done", str, "done")]

        @wire.compensation("undo")
        async def undo(call: lf.EffectCall) -> str:
            self.undone.append(call.idempotency_key)
            return "undone"

        @wire.effect(
            classification="compensatable", completes_by_callback=3600, compensation="undo"
        )
        async def reserve(call: lf.EffectCall) -> dict[str, Any]:
            self.accepted.append(call.idempotency_key)
            return {"accepted": call.idempotency_key}

        @registry.workflow(name="reserve_and_wait", version=1)
        async def reserve_and_wait(ctx: lf.WorkflowContext, _: Any) -> list[Any]:
            reserved, ok = await asyncio.gather(ctx.effect(reserve, 1), ctx.wait_for("ok"))
            return [reserved, ok.payload]

        @registry.workflow(
            name="reserve_beside_a_child", version=1, business_failures=(ChildFailedError,)
        )
        async def reserve_beside_a_child(ctx: lf.WorkflowContext, _: Any) -> list[Any]:
            async with asyncio.TaskGroup() as tasks:
                child = tasks.create_task(ctx.child(echo, 0))
                reserved = tasks.create_task(ctx.effect(reserve, 2))
            return [child.result(), reserved.result()]

        @registry.workflow(name="group", version=1, business_failures=(ChildFailedError,))
        async def group(ctx: lf.WorkflowContext, _: Any) -> list[Any]:
            async with asyncio.TaskGroup() as tasks:
                made = [tasks.create_task(ctx.child(echo, n)) for n in range(3)]
            return [t.result() for t in made]


def _steps(engine: lf.SyncEngine, instance_id: str) -> list[tuple[int, str, str, str | None]]:
    detail = engine.detail(instance_id)
    return [
        (int(s.seq), s.kind.value, s.name, s.status.value)
        for s in sorted(detail.steps, key=lambda s: s.seq)
    ]


def _parks(engine: lf.Engine, instance_id: str) -> list[str | None]:
    """The reasons of the commits that make the instance WAITING, as the store receives them."""
    seen: list[str | None] = []
    store: Any = engine.store
    inner = store.commit

    def commit(commits: list[Commit | Transaction], *, now: float) -> list[Exception | None]:
        for c in commits:
            for one in c.commits if isinstance(c, Transaction) else (c,):
                if one.instance_id != instance_id:
                    continue
                seen.extend(
                    w.reason
                    for w in one.writes
                    if isinstance(w, InstanceWrite)
                    and w.release
                    and w.status is lf.InstanceStatus.WAITING
                )
        result: list[Exception | None] = inner(commits, now=now)
        return result

    store.commit = commit
    return seen


async def _phase(url: str, family: Family, watch: str | None = None) -> list[str | None]:
    """One worker's life: run until nothing is due; the parks of ``watch`` it made."""
    async with lf.Engine(url, family.registry) as engine:
        parks = _parks(engine, watch) if watch else []
        await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
        return parks


async def _children_by_input(url: str, family: Family) -> dict[int, str]:
    async with lf.Engine(url, family.registry) as engine:
        found = await engine.list(workflow="echo", limit=10)
        return {int(r.input_value): r.instance_id for r in found}


async def _status(url: str, family: Family, instance_id: str) -> lf.InstanceStatus:
    async with lf.Engine(url, family.registry) as engine:
        return (await engine.get(instance_id)).status


async def _signal(url: str, family: Family, instance_id: str, name: str, payload: Any) -> None:
    async with lf.Engine(url, family.registry) as engine:
        await engine.signal(instance_id, name, payload=payload, event_id=f"{instance_id}-{name}")


def _replay_clean(url: str, family: Family) -> None:
    with Operations(url) as operations:
        verdicts = operations.replay(family.registry)
    assert verdicts
    assert all(v.compatible for v in verdicts), verdicts


def test_three_children_ending_out_of_order_come_back_in_call_order(journal_url: str) -> None:
    """Goal: ``ctx.child`` in three gathered branches works: the parent parks once with all
    three held, wakes for each ending (the last called ends first), and each branch's next
    step takes the position of call order, live and on every replay.

    Method: start the parent; run a worker until idle (a fresh one each phase); signal the
    children 2, 0, 1, running a worker after each; read the journal, the result and the
    replay checker's verdicts."""
    family = Family()

    async def main() -> tuple[str, list[lf.InstanceStatus], list[list[str | None]]]:
        async with lf.Engine(journal_url, family.registry) as engine:
            started = await engine.start("three", key="three-1", input=None)
        parent = started.instance_id
        parks = [await _phase(journal_url, family, parent)]
        children = await _children_by_input(journal_url, family)
        assert sorted(children) == [0, 1, 2]
        seen = [await _status(journal_url, family, parent)]
        for n in (2, 0, 1):
            await _signal(journal_url, family, children[n], "go", f"go-{n}")
            parks.append(await _phase(journal_url, family, parent))
            seen.append(await _status(journal_url, family, parent))
        return parent, seen, parks

    parent, seen, parks = asyncio.run(main())
    waiting, succeeded = lf.InstanceStatus.WAITING, lf.InstanceStatus.SUCCEEDED
    assert seen == [waiting, waiting, waiting, succeeded]
    # One park per resumption while a child is still running, none once all ended.
    assert [len(p) for p in parks] == [1, 1, 1, 0]
    assert all(f"step {s}" in (parks[0][0] or "") for s in (1, 2, 3))
    with lf.SyncEngine(journal_url, family.registry) as engine:
        assert engine.result(parent) == ["0", "1", "2"]
        steps = _steps(engine, parent)
    assert [(seq, kind) for seq, kind, _, _ in steps] == [
        (1, "child"),
        (2, "child"),
        (3, "child"),
        (4, "local"),
        (5, "local"),
        (6, "local"),
    ]
    assert {status for *_, status in steps} == {"COMPLETED"}
    _replay_clean(journal_url, family)


def test_handles_awaited_in_branches_and_a_replay_from_a_restart(journal_url: str) -> None:
    """Goal: ``start_child`` then ``handle.result()`` in each branch of ``ctx.gather`` works
    the same: values in argument order whatever order the children ended in.

    Method: as above with the ending order 1, 2, 0; then the replay checker."""
    family = Family()

    async def main() -> str:
        async with lf.Engine(journal_url, family.registry) as engine:
            started = await engine.start("handles", key="handles-1", input=None)
        await _phase(journal_url, family)
        children = await _children_by_input(journal_url, family)
        for n in (1, 2, 0):
            assert await _status(journal_url, family, started.instance_id) is (
                lf.InstanceStatus.WAITING
            )
            await _signal(journal_url, family, children[n], "go", n)
            await _phase(journal_url, family)
        return started.instance_id

    parent = asyncio.run(main())
    with lf.SyncEngine(journal_url, family.registry) as engine:
        assert engine.get(parent).status is lf.InstanceStatus.SUCCEEDED
        assert engine.result(parent) == [0, 1, 2]
    _replay_clean(journal_url, family)


def test_a_child_an_async_effect_and_a_signal_wait_park_once_and_wake_for_each(
    journal_url: str,
) -> None:
    """Goal: a child's result, an asynchronous effect's callback and a signal wait gathered:
    one commit parks the instance for all three once the transfer is accepted; the callback,
    the child's ending and the signal each wake it, and it ends with every value in place.

    Method: start; run a worker; check the parks and the states; complete the effect, end
    the child, send the signal, a worker after each; read the result, journal and replay."""
    family = Family()

    async def main() -> tuple[str, list[list[str | None]], list[lf.InstanceStatus]]:
        async with lf.Engine(journal_url, family.registry) as engine:
            started = await engine.start("mixed", key="mixed-1", input=None)
        parent = started.instance_id
        parks = [await _phase(journal_url, family, parent)]
        seen = [await _status(journal_url, family, parent)]
        (key,) = family.accepted
        async with lf.Engine(journal_url, family.registry) as engine:
            [effect] = (await engine.detail(parent)).effects
            assert effect.state is lf.EffectState.ACCEPTED
            await engine.complete_effect(key, applied=True, evidence={"ref": "W-1"})
        parks.append(await _phase(journal_url, family, parent))
        seen.append(await _status(journal_url, family, parent))
        (child,) = (await _children_by_input(journal_url, family)).values()
        await _signal(journal_url, family, child, "go", "child-go")
        parks.append(await _phase(journal_url, family, parent))
        seen.append(await _status(journal_url, family, parent))
        await _signal(journal_url, family, parent, "ok", "ok!")
        parks.append(await _phase(journal_url, family, parent))
        seen.append(await _status(journal_url, family, parent))
        return parent, parks, seen

    parent, parks, seen = asyncio.run(main())
    waiting = lf.InstanceStatus.WAITING
    assert seen == [waiting, waiting, waiting, lf.InstanceStatus.SUCCEEDED]
    assert [len(p) for p in parks] == [1, 1, 1, 0]
    assert all(what in (parks[0][0] or "") for what in ("child", "wire.transfer", "wait:ok"))
    assert family.accepted == [family.accepted[0]]  # dispatched once, never again on replay
    with lf.SyncEngine(journal_url, family.registry) as engine:
        assert engine.result(parent) == ["child-go", {"ref": "W-1"}, "ok!", "done"]
        [effect] = engine.detail(parent).effects
        assert effect.state is lf.EffectState.CONFIRMED
        assert [(seq, kind) for seq, kind, _, _ in _steps(engine, parent)] == [
            (1, "child"),
            (2, "effect"),
            (3, "wait"),
            (4, "local"),
        ]
    _replay_clean(journal_url, family)


def test_a_failing_child_in_a_task_group_fails_the_parent_once_its_turn_comes(
    journal_url: str,
) -> None:
    """Goal: a child failing in a ``TaskGroup``: its failure comes back in its turn (after the
    result of every child called before it), the group cancels the sibling still running, the
    parent fails with that child's error; every ending taken is recorded, and the sibling left
    running is cancelled by the parent's ending (``on_parent_end="cancel"``).

    Method: three children; child 1 fails first (its failure waits in turn behind child 0,
    still running), then child 0 succeeds: the failure propagates while child 2 still runs;
    read the statuses, the journal and the replay checker's verdicts."""
    family = Family()

    async def main() -> tuple[str, dict[int, str], list[lf.InstanceStatus]]:
        async with lf.Engine(journal_url, family.registry) as engine:
            started = await engine.start("group", key="group-1", input=None)
        parent = started.instance_id
        await _phase(journal_url, family)
        children = await _children_by_input(journal_url, family)
        seen = []
        await _signal(journal_url, family, children[1], "go", "fail")
        await _phase(journal_url, family)
        seen.append(await _status(journal_url, family, parent))
        await _signal(journal_url, family, children[0], "go", "fine")
        await _phase(journal_url, family)
        seen.append(await _status(journal_url, family, parent))
        return parent, children, seen

    parent, children, seen = asyncio.run(main())
    # Child 1's failure waits for child 0's result (called before it): WAITING, then FAILED.
    assert seen == [lf.InstanceStatus.WAITING, lf.InstanceStatus.FAILED]
    with lf.SyncEngine(journal_url, family.registry) as engine:
        record = engine.get(parent)
        assert "ChildFailedError" in (record.reason or "")
        assert "child 1 was told to fail" in (record.reason or "")
        steps = {seq: status for seq, kind, _, status in _steps(engine, parent)}
        # Both endings taken are recorded; the child still running when the group was
        # cancelled keeps its step open, and the parent's ending cancels it.
        assert steps == {1: "COMPLETED", 2: "COMPLETED", 3: "STARTED"}
        assert engine.get(children[0]).status is lf.InstanceStatus.SUCCEEDED
        assert engine.get(children[1]).status is lf.InstanceStatus.FAILED
        left = engine.get(children[2])
        assert left.cancel_requested_at is not None or left.status is lf.InstanceStatus.CANCELLED
    _replay_clean(journal_url, family)


def test_a_cancel_waits_for_an_accepted_effect_in_a_branch_then_undoes_it(
    journal_url: str,
) -> None:
    """Goal: a cancel request while an asynchronous effect and a signal wait are gathered:
    the wait stops, but the accepted reservation is in flight, so the instance stays WAITING
    for its callback (never CANCELLED with it ACCEPTED); the callback confirms it, and the
    cancellation then undoes it.

    Method: start; a worker parks it; request the cancel, a worker; complete the effect, a
    worker; read statuses, effects and the compensation the participant ran."""
    family = Family()

    async def main() -> tuple[str, list[Any]]:
        async with lf.Engine(journal_url, family.registry) as engine:
            started = await engine.start("reserve_and_wait", key="rw-1", input=None)
        parent = started.instance_id
        await _phase(journal_url, family)
        seen: list[Any] = [await _status(journal_url, family, parent)]
        async with lf.Engine(journal_url, family.registry) as engine:
            await engine.cancel(parent, reason="changed my mind")
        await _phase(journal_url, family)
        async with lf.Engine(journal_url, family.registry) as engine:
            record = await engine.get(parent)
            [effect] = (await engine.detail(parent)).effects
            seen += [record.status, record.reason_code, effect.state]
            await engine.complete_effect(effect.idempotency_key, applied=True, evidence="R-1")
        await _phase(journal_url, family)
        seen.append(await _status(journal_url, family, parent))
        return parent, seen

    parent, seen = asyncio.run(main())
    assert seen == [
        lf.InstanceStatus.WAITING,
        lf.InstanceStatus.WAITING,
        "awaiting_callback",
        lf.EffectState.ACCEPTED,
        lf.InstanceStatus.CANCELLED,
    ]
    assert len(family.undone) == 1  # the reservation undone once
    assert len(family.accepted) == 1
    with lf.SyncEngine(journal_url, family.registry) as engine:
        states = sorted((int(e.seq), e.state.value) for e in engine.detail(parent).effects)
    assert states == [(-1, "CONFIRMED"), (1, "CONFIRMED")]


def test_a_child_failing_beside_an_accepted_effect_fails_only_once_it_is_settled(
    journal_url: str,
) -> None:
    """Goal: in a ``TaskGroup``, a child that fails while a sibling's reservation is accepted
    and unanswered: the group cancels the sibling's branch, but the parent waits for the
    callback before it records the failure, and its saga then undoes the reservation.

    Method: start; a worker; the child told to fail, a worker (WAITING, the effect
    ACCEPTED); the callback, a worker; read the ending and the compensation."""
    family = Family()

    async def main() -> tuple[str, list[Any]]:
        async with lf.Engine(journal_url, family.registry) as engine:
            started = await engine.start("reserve_beside_a_child", key="rc-1", input=None)
        parent = started.instance_id
        await _phase(journal_url, family)
        (child,) = (await _children_by_input(journal_url, family)).values()
        await _signal(journal_url, family, child, "go", "fail")
        await _phase(journal_url, family)
        async with lf.Engine(journal_url, family.registry) as engine:
            record = await engine.get(parent)
            [effect] = (await engine.detail(parent)).effects
            seen: list[Any] = [record.status, effect.state]
            await engine.complete_effect(effect.idempotency_key, applied=True, evidence="R-2")
        await _phase(journal_url, family)
        seen.append(await _status(journal_url, family, parent))
        return parent, seen

    parent, seen = asyncio.run(main())
    assert seen == [
        lf.InstanceStatus.WAITING,
        lf.EffectState.ACCEPTED,
        lf.InstanceStatus.COMPENSATED,
    ]
    assert len(family.undone) == 1  # the reservation undone once
    assert len(family.accepted) == 1
    with lf.SyncEngine(journal_url, family.registry) as engine:
        states = sorted((int(e.seq), e.state.value) for e in engine.detail(parent).effects)
    assert states == [(-2, "CONFIRMED"), (2, "CONFIRMED")]
    _replay_clean(journal_url, family)
