"""Child workflows: started in the parent's transaction, their endings kept in the parent's
inbox in the child's ending transaction, typed outcomes, policies on the parent's end.

Every test runs on a real SQLite file and on PostgreSQL (``journal_url``), with real workers
(``until_idle``: the run ends when nothing is runnable). Faults are named points
(``child.*``) crashing the worker in-process, where a replay then has to pick up.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.errors import (
    ChildCompensatedError,
    ChildFailedError,
    ChildKeyConflictError,
    ChildNeedsInterventionError,
    ChildWorkflowError,
    WorkflowError,
)
from ledgerflow.ledger.transaction import RequestCancel
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey, InstanceId
from ledgerflow.model.repair import RepairKind
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.repairs import RepairRequest
from ledgerflow.operators.service import Operations
from ledgerflow.runtime import faults
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash
from ledgerflow.storage import open_store
from ledgerflow.testing import replay_history
from ledgerflow.testing.oracle import Snapshot, child_endings_reach_their_parent


class Boom(lf.BusinessFailure):
    """The child's declared failure."""


class Shop:
    """A parent ``order`` and its children, and what the participant applied."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()
        self.registry = registry = lf.Registry()
        bank = registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.effect(classification="compensatable", compensation="refund")
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"charged": call.payload}

        @bank.compensation("refund")
        async def refund(call: lf.EffectCall) -> str:
            self.applied[call.idempotency_key] += 1
            return "refunded"

        @registry.workflow(name="pay", version=1)
        async def pay(ctx: lf.WorkflowContext, amount: int) -> dict[str, Any]:
            receipt = await ctx.effect(charge, amount)
            if amount < 0:
                raise Boom("a negative amount, after the charge")
            return {"amount": amount, "receipt": receipt}

        @registry.workflow(name="fail", version=1)
        async def fail(ctx: lf.WorkflowContext, _: Any) -> None:
            raise Boom("nothing done")

        @registry.workflow(name="hold", version=1)
        async def hold(ctx: lf.WorkflowContext, _: Any) -> str:
            await ctx.wait_for("release")
            return "released"

        @registry.workflow(name="order", version=1)
        async def order(ctx: lf.WorkflowContext, amount: int) -> Any:
            return await ctx.child(pay, amount)

        @registry.workflow(name="fan", version=1)
        async def fan(ctx: lf.WorkflowContext, n: int) -> list[Any]:
            handles = [await ctx.start_child("pay", i) for i in range(n)]
            return [await h.result() for h in handles]

        @registry.workflow(name="gathered_fan", version=1)
        async def gathered_fan(ctx: lf.WorkflowContext, n: int) -> list[Any]:
            # Started from parallel branches; awaited after the gather, in the workflow's task.
            handles = await ctx.gather(*(ctx.start_child("pay", i) for i in range(n)))
            return [await h.result() for h in handles]

        @registry.workflow(name="awaited_in_branches", version=1)
        async def awaited_in_branches(ctx: lf.WorkflowContext, n: int) -> list[Any]:
            return await ctx.gather(*(ctx.child("pay", i) for i in range(n)))

        @registry.workflow(name="catching", version=1)
        async def catching(ctx: lf.WorkflowContext, child: str) -> dict[str, Any]:
            try:
                await ctx.child(child, -1)
            except ChildWorkflowError as error:
                return {
                    "type": type(error).__name__,
                    "status": error.status,
                    "cause": error.cause,
                    "child_id": error.child_id,
                    "residual": list(error.residual),
                }
            return {"type": None}

        @registry.workflow(name="keyed", version=1)
        async def keyed(ctx: lf.WorkflowContext, key: str) -> Any:
            try:
                return await ctx.child("pay", 5, key=key)
            except ChildKeyConflictError as error:
                return {"conflict": error.holder}

        @registry.workflow(name="parent-of-hold", version=1)
        async def parent_of_hold(ctx: lf.WorkflowContext, policy: str) -> str:
            await ctx.start_child(hold, None, on_parent_end=policy)  # type: ignore[arg-type]
            await ctx.wait_for("finish")
            return "done"

        @registry.workflow(name="quick-parent", version=1)
        async def quick_parent(ctx: lf.WorkflowContext, _: Any) -> str:
            handle = await ctx.start_child(hold, None, on_parent_end="abandon")
            return str(handle.child_id)


async def _work(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_idle=True)


def _children(detail: lf.InstanceDetail) -> list[Any]:
    return [s for s in detail.steps if s.kind is StepKind.CHILD]


def test_a_child_returns_its_result_and_is_linked_to_its_parent(journal_url: str) -> None:
    """Goal: ``ctx.child`` starts the child, waits without holding anything, and returns its
    result; the child's row links back to the parent's run and position; its key is derived
    from the parent's key, run and position.

    Method: an order of 7 starts pay(7); a worker runs until idle. The order's result is the
    child's; the child is SUCCEEDED with parent_instance_id/run/seq set; the parent's CHILD
    step is COMPLETED; the child's ending event is CONSUMED by that step.
    """
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("order", key="o-1", input=7)
            await _work(engine)
            result = await engine.result(started.instance_id, timeout=10)
            assert result["amount"] == 7
            detail = await engine.detail(started.instance_id)
            [step] = _children(detail)
            assert step.status is StepStatus.COMPLETED
            child_key = "o-1/r1/s1/child"
            assert step.input_value["key"] == child_key
            [event] = [d for d in detail.inbox if d.name.startswith("child:")]
            assert event.state.value == "CONSUMED"
            assert event.consumed_seq == 1
            child_id = event.name.removeprefix("child:")
            child = await engine.get(child_id)
            assert child.business_key == child_key
            assert child.status is lf.InstanceStatus.SUCCEEDED
            assert (child.parent_instance_id, child.parent_run, child.parent_seq) == (
                started.instance_id,
                1,
                1,
            )

    asyncio.run(main())
    assert list(shop.applied.values()) == [1]


def test_many_children_at_once(journal_url: str) -> None:
    """Goal: start_child starts without waiting; many children run, each result is returned
    at its position, each effect applied once."""
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("fan", key="f-1", input=12)
            await _work(engine)
            results = await engine.result(started.instance_id, timeout=20)
            assert [r["amount"] for r in results] == list(range(12))
            detail = await engine.detail(started.instance_id)
            assert [s.seq for s in _children(detail)] == list(range(1, 13))

    asyncio.run(main())
    assert sorted(shop.applied.values()) == [1] * 12


def test_children_started_from_parallel_branches_take_positions_in_call_order(
    journal_url: str,
) -> None:
    """Goal: children started from a gather's branches take their positions in call order
    (each child's default key names its position), are handed back in that order, and each
    runs once; a replay after the parent's waits starts none again.

    Method: start 6 children in one ``ctx.gather``, await each afterwards; read the parent's
    child steps, the children's keys and the participant's record."""
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("gathered_fan", key="g-1", input=6)
            await _work(engine)
            results = await engine.result(started.instance_id, timeout=20)
            assert [r["amount"] for r in results] == list(range(6))
            detail = await engine.detail(started.instance_id)
            assert [s.seq for s in _children(detail)] == list(range(1, 7))
            children = await engine.list(workflow="pay", limit=10)
            # The child called i-th (input i) holds position i + 1, whatever finished first.
            assert {c.input_value: c.business_key for c in children} == {
                i: f"g-1/r1/s{i + 1}/child" for i in range(6)
            }
            for child in children:
                assert await engine.result(child.instance_id, timeout=5) == {
                    "amount": int(child.input_value),
                    "receipt": {"charged": int(child.input_value)},
                }

    asyncio.run(main())
    assert sorted(shop.applied.values()) == [1] * 6


def test_child_results_awaited_inside_branches_come_back_in_call_order(
    journal_url: str,
) -> None:
    """Goal: ``ctx.child`` inside a gather works (issue 26): both children start, the
    parent waits for both at once and ends with their results in call order, each child
    charged once, and the replay checker finds the history clean.

    Method: a parent gathers two ``ctx.child`` calls; run until idle; read the parent's
    result, its journal and the replay verdicts."""
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("awaited_in_branches", key="b-1", input=2)
            await _work(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.SUCCEEDED
            assert [r["amount"] for r in await engine.result(started.instance_id)] == [0, 1]
            steps = _children(await engine.detail(started.instance_id))
            assert [(int(s.seq), s.status) for s in steps] == [
                (1, StepStatus.COMPLETED),
                (2, StepStatus.COMPLETED),
            ]
            assert len(await engine.list(workflow="pay", limit=10)) == 2

    asyncio.run(main())
    assert sorted(shop.applied.values()) == [1, 1]
    with Operations(journal_url) as operations:
        verdicts = operations.replay(shop.registry)
    assert verdicts
    assert all(v.compatible for v in verdicts), verdicts


def test_the_fan_out_bound_parks_the_parent_with_a_clear_reason(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: a run that would have more than CHILDREN_OPEN_MAX children open is parked
    (child_limit) naming the bound, before the extra child starts."""
    monkeypatch.setattr(limits, "CHILDREN_OPEN_MAX", 3)
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("fan", key="f-2", input=5)
            await _work(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
            assert record.reason_code == "child_limit"
            assert "at most 3" in (record.reason or "")
            detail = await engine.detail(started.instance_id)
            assert len(_children(detail)) == 3

    asyncio.run(main())


def test_an_explicit_key_held_by_an_unrelated_instance_is_a_typed_conflict(
    journal_url: str,
) -> None:
    """Goal: a child's explicit key that another instance holds (same workflow, same input,
    started from outside) raises ChildKeyConflictError naming the holder; nothing is
    attached, the holder is untouched, the parent's step is not written.

    Method: start pay(5) under key "shared" from outside and let it finish; a parent asks for
    a child pay(5) with key "shared": the workflow catches the conflict and returns the holder.
    """
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            holder = await engine.start("pay", key="shared", input=5)
            await _work(engine)
            before = await engine.get(holder.instance_id)
            parent = await engine.start("keyed", key="k-1", input="shared")
            await _work(engine)
            assert await engine.result(parent.instance_id, timeout=10) == {
                "conflict": holder.instance_id
            }
            after = await engine.get(holder.instance_id)
            assert after == before
            assert after.parent_instance_id is None
            assert _children(await engine.detail(parent.instance_id)) == []

    asyncio.run(main())


@pytest.mark.parametrize(
    ("child", "error", "status"),
    [
        ("fail", ChildFailedError, "FAILED"),
        ("pay", ChildCompensatedError, "COMPENSATED"),
    ],
)
def test_a_child_that_did_not_succeed_raises_its_typed_error(
    journal_url: str, child: str, error: type[ChildWorkflowError], status: str
) -> None:
    """Goal: a FAILED child reaches the parent as ChildFailedError, a COMPENSATED one as
    ChildCompensatedError (never a plain failure), each with the child's status and cause."""
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("catching", key=f"c-{child}", input=child)
            await _work(engine)
            got = await engine.result(started.instance_id, timeout=10)
            assert got["type"] == error.__name__
            assert got["status"] == status
            assert "Boom" in got["cause"]
            assert got["residual"] == []
            record = await engine.get(got["child_id"])
            assert record.status.value == status

    asyncio.run(main())


def test_an_uncaught_child_failure_ends_the_parent_truthfully(journal_url: str) -> None:
    """Goal: a parent that does not catch its child's COMPENSATED ending fails as a business
    failure (FAILED: the parent itself confirmed nothing), its cause naming the child."""
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("order", key="o-neg", input=-1)
            await _work(engine)
            with pytest.raises(WorkflowError) as raised:
                await engine.result(started.instance_id, timeout=10)
            assert raised.value.status == "FAILED"
            assert "ChildCompensatedError" in (raised.value.cause or "")

    asyncio.run(main())


def test_a_cancelled_parent_cancels_its_children_and_abandon_leaves_them(
    journal_url: str,
) -> None:
    """Goal: a parent's ending reaches its live children by their policy: "cancel" children
    get a durable cancel request in the parent's ending transaction and end CANCELLED;
    "abandon" children keep running.

    Method: two parents each start a child that waits for a signal, then wait themselves;
    both parents are cancelled. The cancel child ends CANCELLED; the abandon child is still
    WAITING, with no cancel request; its ending, later, is kept in the ended parent's inbox
    as refused ("ended"), never lost.
    """
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            cancel = await engine.start("parent-of-hold", key="p-cancel", input="cancel")
            abandon = await engine.start("parent-of-hold", key="p-abandon", input="abandon")
            await _work(engine)
            for parent in (cancel, abandon):
                await engine.cancel(parent.instance_id, reason="customer left")
            await _work(engine)
            kids = {}
            for parent in (cancel, abandon):
                assert (await engine.get(parent.instance_id)).status is (
                    lf.InstanceStatus.CANCELLED
                )
                [step] = _children(await engine.detail(parent.instance_id))
                key = step.input_value["key"]
                kids[parent.instance_id] = next(
                    r for r in await engine.list(workflow="hold", limit=10) if r.business_key == key
                )
            assert kids[cancel.instance_id].status is lf.InstanceStatus.CANCELLED
            left = kids[abandon.instance_id]
            assert left.status is lf.InstanceStatus.WAITING
            assert left.cancel_requested_at is None
            await engine.signal(left.instance_id, "release", event_id="r-1")
            await _work(engine)
            assert (await engine.get(left.instance_id)).status is lf.InstanceStatus.SUCCEEDED
            inbox = (await engine.detail(abandon.instance_id)).inbox
            [kept] = [d for d in inbox if d.name == f"child:{left.instance_id}"]
            assert kept.state.value == "REJECTED"
            assert kept.refusal == "ended"

    asyncio.run(main())


def test_a_child_outcome_is_kept_when_the_parent_ended_first(journal_url: str) -> None:
    """Goal: the child's ending reaches the parent's inbox even after the parent SUCCEEDED
    (a Temporal parent that closed loses it): kept, refused as ended, with the outcome."""
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            parent = await engine.start("quick-parent", key="q-1")
            await _work(engine)
            child_id = await engine.result(parent.instance_id, timeout=10)
            assert (await engine.get(child_id)).status is lf.InstanceStatus.WAITING
            await engine.signal(child_id, "release", event_id="r-1")
            await _work(engine)
            [kept] = [
                d
                for d in (await engine.detail(parent.instance_id)).inbox
                if d.name == f"child:{child_id}"
            ]
            assert kept.refusal == "ended"
            assert kept.payload_value["status"] == "SUCCEEDED"

    asyncio.run(main())


@pytest.mark.parametrize("point", ["child.before_start", "child.after_start", "child.before_take"])
def test_a_crash_in_the_child_protocol_never_starts_a_child_twice(
    journal_url: str, point: str
) -> None:
    """Goal: a worker that dies before the start commit, after it, or before taking the
    child's ending leaves one child per parent position; the next worker's replay finds the
    recorded child (never a second one), and the parent ends with the child's result.

    Method: a fault plan crashes the worker (SimulatedCrash, the whole worker dies) at the
    point once; a second engine and worker pick up after the lease lapses.
    """
    shop = Shop()

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("order", key=f"crash-{point}", input=3)
            faults.install(FaultPlan([FaultRule(point=point, action="crash")]))
            try:
                with pytest.raises(SimulatedCrash):
                    await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)
            finally:
                faults.install(None)
        async with lf.Engine(journal_url, shop.registry) as engine:
            await _work(engine)
            assert (await engine.result(started.instance_id, timeout=10))["amount"] == 3
            pays = await engine.list(workflow="pay", limit=10)
            assert len(pays) == 1

    asyncio.run(main())
    assert list(shop.applied.values()) == [1]


def test_a_needs_intervention_child_is_not_a_plain_failure(
    journal_url: str, tmp_path: Path
) -> None:
    """Goal: a child parked in MANUAL_INTERVENTION reaches its parent as
    ChildNeedsInterventionError (terminal, not final: an operator may still resume it); an
    operator's later ending of the child is kept in the parent's inbox too."""
    registry = lf.Registry()

    @registry.workflow(name="broken", version=1)
    async def broken(ctx: lf.WorkflowContext, _: Any) -> None:
        raise ZeroDivisionError("a defect")  # parked as workflow_defect after its retries

    @registry.workflow(name="asks", version=1, defect_retry=lf.RetryPolicy(attempts_max=1))
    async def asks(ctx: lf.WorkflowContext, _: Any) -> str:
        try:
            await ctx.child(broken)
        except ChildNeedsInterventionError as error:
            return f"{error.status} {error.reason_code}"
        return "no"

    async def main() -> str:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start("asks", key="a-1")
            await _work(engine)
            assert await engine.result(started.instance_id, timeout=20) == (
                "MANUAL_INTERVENTION workflow_defect"
            )
            return started.instance_id

    parent = asyncio.run(main())
    policy = tmp_path / "authority.toml"
    policy.write_text('[roles]\noperator = ["force-terminal"]\n[actors]\nalice = ["operator"]\n')
    # An operator ends the parked child FAILED (the store's repair, no worker): that ending
    # reaches the parent's inbox in the repair's transaction too, kept as refused (ended).
    with Operations(journal_url, authority=Authority.from_file(policy)) as operations:
        [child] = operations.detail(parent).children
        request = RepairRequest(
            kind=RepairKind.FORCE_TERMINAL,
            instance_id=child.instance_id,
            actor="alice",
            reason="ticket OPS-7",
            status=lf.InstanceStatus.FAILED,
        )
        assert operations.apply(request).outcome == "applied"
    store = open_store(journal_url)
    try:
        inbox = store.inbox(InstanceId(parent))
        name = f"child:{child.instance_id}"
        assert [d.payload_value["status"] for d in inbox if d.name == name] == [
            "MANUAL_INTERVENTION",
            "FAILED",
        ]
        assert list(child_endings_reach_their_parent(Snapshot.of(store))) == []
    finally:
        store.close()


def test_a_wait_child_ends_before_its_parent_records_its_result(journal_url: str) -> None:
    """Goal: on_parent_end="wait": the parent returned, yet its ending is recorded only after
    the child's (the parent waits, durably, for it)."""
    registry = lf.Registry()

    @registry.workflow(name="hold", version=1)
    async def hold(ctx: lf.WorkflowContext, _: Any) -> str:
        await ctx.wait_for("release")
        return "released"

    @registry.workflow(name="waits", version=1)
    async def waits(ctx: lf.WorkflowContext, _: Any) -> str:
        await ctx.start_child(hold, None, on_parent_end="wait")
        return "parent done"

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            parent = await engine.start("waits", key="w-1")
            await _work(engine)
            assert (await engine.get(parent.instance_id)).status is lf.InstanceStatus.WAITING
            [child] = await engine.list(workflow="hold", limit=5)
            await engine.signal(child.instance_id, "release", event_id="r-1")
            await _work(engine)
            assert await engine.result(parent.instance_id, timeout=10) == "parent done"

    asyncio.run(main())


class _CancelBeforeTheStart(FaultPlan):
    """At the middle child's ``child.before_start`` (it read no cancel request, its start is
    not committed yet) the cascade's cancel requests land, from another connection."""

    def __init__(self, url: str, key: str, ids: list[str]) -> None:
        super().__init__([])
        self.url, self.key, self.ids = url, key, ids

    def hit(self, name: str, where: dict[str, Any]) -> None:
        if name != "child.before_start" or where.get("instance") != self.key or not self.ids:
            return
        store = open_store(self.url)
        try:
            for instance_id in self.ids:
                store.request_cancel(
                    RequestCancel(instance_id=InstanceId(instance_id), reason="cascade"), now=0.0
                )
        finally:
            store.close()
        self.ids = []


def test_a_cancel_racing_a_grandchilds_start_leaves_no_live_descendant(journal_url: str) -> None:
    """Goal: a cancel request that reaches a child after it decided to start a grandchild and
    before that start is committed refuses the start (the same transaction checks it): no
    grandchild is ever started, and the whole family ends CANCELLED.

    Method: top -> mid -> leaf. A fault plan writes the cancel requests of top and mid (what
    top's cancel cascade writes) from another connection at mid's ``child.before_start``.
    """
    registry = lf.Registry()

    @registry.workflow(name="leaf", version=1)
    async def leaf(ctx: lf.WorkflowContext, _: Any) -> str:
        await ctx.wait_for("never")
        return "leaf"

    @registry.workflow(name="mid", version=1)
    async def mid(ctx: lf.WorkflowContext, _: Any) -> Any:
        await ctx.step("before", lambda: 1)
        return await ctx.child(leaf)

    @registry.workflow(name="top", version=1)
    async def top(ctx: lf.WorkflowContext, _: Any) -> Any:
        return await ctx.child(mid)

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start("top", key="t-1")
            mid_id = instance_id_for(DEFAULT_TENANT, "mid", BusinessKey("t-1/r1/s1/child"))
            faults.install(
                _CancelBeforeTheStart(journal_url, "t-1/r1/s1/child", [started.instance_id, mid_id])
            )
            try:
                await _work(engine)
            finally:
                faults.install(None)
            assert await engine.list(workflow="leaf", limit=5) == []
            for instance_id in (started.instance_id, mid_id):
                assert (await engine.get(instance_id)).status is lf.InstanceStatus.CANCELLED
            steps = (await engine.detail(mid_id)).steps
            assert [s.kind for s in steps] == [StepKind.LOCAL]

    asyncio.run(main())


def test_a_parents_history_replays_clean_and_a_changed_child_diverges(journal_url: str) -> None:
    """Goal: the replay checker answers a CHILD position from the journal (the start is
    proven; an ending not yet taken is the frontier): a finished parent and one still waiting
    for its child replay compatible; code that now starts another workflow there diverges at
    that position. An exported history without the parent link (an older export) still reads.
    """
    shop = Shop()

    async def main() -> tuple[str, str]:
        async with lf.Engine(journal_url, shop.registry) as engine:
            done = await engine.start("fan", key="h-1", input=3)
            waiting = await engine.start("parent-of-hold", key="h-2", input="abandon")
            await _work(engine)
            assert (await engine.get(done.instance_id)).status is lf.InstanceStatus.SUCCEEDED
            return done.instance_id, waiting.instance_id

    done, waiting = asyncio.run(main())
    with Operations(journal_url) as operations:
        histories = [operations.export(i) for i in (done, waiting)]
    for history in histories:
        verdict = replay_history(shop.registry, history)
        assert verdict.compatible, verdict
    older = {**histories[0], "instance": dict(histories[0]["instance"])}
    for name in ("parent_instance_id", "parent_run", "parent_seq", "on_parent_end"):
        del older["instance"][name]
    assert replay_history(shop.registry, older).compatible

    changed = lf.Registry()

    @changed.workflow(name="pay", version=1)
    async def pay(ctx: lf.WorkflowContext, amount: int) -> int:
        return amount

    @changed.workflow(name="other", version=1)
    async def other(ctx: lf.WorkflowContext, amount: int) -> int:
        return amount

    @changed.workflow(name="fan", version=1)
    async def fan(ctx: lf.WorkflowContext, n: int) -> list[Any]:
        handles = [await ctx.start_child("other", i) for i in range(n)]
        return [await h.result() for h in handles]

    verdict = replay_history(changed, histories[0])
    assert not verdict.compatible
    assert verdict.position == 1


def test_a_cancelled_or_forward_only_child_names_its_residual_effects(journal_url: str) -> None:
    """Goal: a child that ends CANCELLED or FORWARD_RECOVERY_REQUIRED after a pivot reaches its
    parent as ChildCancelledError / ChildForwardRecoveryRequiredError whose ``residual``
    names the effects that stay applied (the notification sent), never a plain failure."""
    registry = lf.Registry()
    mail = registry.add_participant(lf.Participant("mail", deduplicates=True))

    @mail.effect(classification="forward-recovery-only")
    async def notify(call: lf.EffectCall) -> str:
        return "sent"

    @registry.workflow(name="announce", version=1)
    async def announce(ctx: lf.WorkflowContext, then: str) -> str:
        await ctx.effect(notify, {"then": then})
        if then == "fail":
            raise Boom("after the notification")
        await ctx.wait_for("go")
        return "announced"

    @registry.workflow(name="asks", version=1)
    async def asks(ctx: lf.WorkflowContext, then: str) -> list[Any]:
        try:
            await ctx.child(announce, then)
        except ChildWorkflowError as error:
            return [type(error).__name__, error.status, list(error.residual)]
        return []

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            fails = await engine.start("asks", key="r-fail", input="fail")
            waits = await engine.start("asks", key="r-wait", input="wait")
            await _work(engine)
            [child] = (await engine.detail(waits.instance_id)).children
            await engine.cancel(child.instance_id, reason="not needed")
            await _work(engine)
            assert await engine.result(fails.instance_id, timeout=10) == [
                "ChildForwardRecoveryRequiredError",
                "FORWARD_RECOVERY_REQUIRED",
                ["mail.notify"],
            ]
            assert await engine.result(waits.instance_id, timeout=10) == [
                "ChildCancelledError",
                "CANCELLED",
                ["mail.notify"],
            ]

    asyncio.run(main())


def test_an_operator_ending_a_parked_parent_cancels_its_children(
    journal_url: str, tmp_path: Path
) -> None:
    """Goal: a parent's final ending reaches its live "cancel" children whoever writes it: a
    parent parked (MANUAL_INTERVENTION, not final: its child keeps running) that an operator
    then ends FAILED asks the child to cancel in the repair's transaction; the child ends
    CANCELLED, its "abandon" sibling keeps waiting."""
    registry = lf.Registry()

    @registry.workflow(name="hold", version=1)
    async def hold(ctx: lf.WorkflowContext, _: Any) -> str:
        await ctx.wait_for("release")
        return "released"

    @registry.workflow(name="breaks", version=1, defect_retry=lf.RetryPolicy(attempts_max=1))
    async def breaks(ctx: lf.WorkflowContext, _: Any) -> None:
        await ctx.start_child(hold, "cancel")
        await ctx.start_child(hold, "abandon", on_parent_end="abandon")
        raise ZeroDivisionError("a defect, after the children started")

    async def run() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            await engine.start("breaks", key="b-1")
            await _work(engine)

    asyncio.run(run())
    policy = tmp_path / "authority.toml"
    policy.write_text('[roles]\noperator = ["force-terminal"]\n[actors]\nalice = ["operator"]\n')
    with Operations(journal_url, authority=Authority.from_file(policy)) as operations:
        parent = instance_id_for(DEFAULT_TENANT, "breaks", BusinessKey("b-1"))
        detail = operations.detail(parent)
        assert detail.instance.status is lf.InstanceStatus.MANUAL_INTERVENTION
        kids = {c.input_value: c for c in detail.children}
        assert {c.status for c in kids.values()} == {lf.InstanceStatus.WAITING}
        assert all(c.cancel_requested_at is None for c in kids.values())
        request = RepairRequest(
            kind=RepairKind.FORCE_TERMINAL,
            instance_id=InstanceId(parent),
            actor="alice",
            reason="ticket OPS-9",
            status=lf.InstanceStatus.FAILED,
        )
        assert operations.apply(request).outcome == "applied"
    asyncio.run(run())
    with Operations(journal_url) as operations:
        kids = {c.input_value: c for c in operations.detail(parent).children}
    assert kids["cancel"].status is lf.InstanceStatus.CANCELLED
    assert kids["abandon"].status is lf.InstanceStatus.WAITING
    assert kids["abandon"].cancel_requested_at is None
