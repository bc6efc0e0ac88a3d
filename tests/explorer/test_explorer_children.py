"""The explorer crashes a parent and its child at every fault point of the child protocol, and
the oracle holds: one child per parent position, every child's ending in its parent's inbox,
no effect applied twice, every instance ended truthfully.

A parent that fails, or is cancelled, once it started a child with ``on_parent_end="wait"``
ends only after that child (checked at every crash point and every arrival); with the wait
reverted to the old rule (only when the parent's code returns) the sweep finds the failing
parent ending first.

With the fix reverted (the child started in a transaction of its own, before the parent's step,
under a key minted afresh by each attempt, as a DBOS or Dapr parent does), the same sweep finds
a second child at a position: the one-transaction start is what keeps it out.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.ledger.records import NewInstance, StartInstance
from ledgerflow.ledger.transitions import new_step
from ledgerflow.model.ids import RunNumber
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.step import StepEvent, StepKind
from ledgerflow.runtime import children as children_module
from ledgerflow.runtime import faults
from ledgerflow.testing import Explorer, Summary, scenario_for

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


def _family() -> lf.Registry:
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank", deduplicates=True))
    mail = registry.add_participant(lf.Participant("mail", deduplicates=True))

    @bank.effect(classification="compensatable", compensation="refund")
    async def charge(call: lf.EffectCall) -> Any:
        return {}

    @bank.compensation("refund")
    async def refund(call: lf.EffectCall) -> Any:
        return {}

    @mail.effect(classification="forward-recovery-only")
    async def notify(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="pay", version=1)
    async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
        return await ctx.effect(charge, {"amount": amount})

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, n: int) -> Any:
        paid = await ctx.child(pay, n)
        await ctx.effect(notify, {"order": n})
        return paid

    @registry.workflow(name="refused", version=1)
    async def refused(ctx: lf.WorkflowContext, n: int) -> Any:
        # A failure once its "wait" child started: FAILED, but only after the child's ending.
        await ctx.start_child(pay, n, on_parent_end="wait")
        raise Refused(f"order {n} refused")

    @registry.workflow(name="held", version=1)
    async def held(ctx: lf.WorkflowContext, n: int) -> Any:
        # Cancelled at the wait (or anywhere): CANCELLED only after the "wait" child's ending.
        await ctx.start_child(pay, n, on_parent_end="wait")
        await ctx.wait_for("go")
        return n

    return registry


class Refused(lf.BusinessFailure):
    """The parent's declared failure."""


def _sweep(tmp_path: Path, workflow: str = "order") -> Summary:
    explorer = Explorer(scenario_for(_family(), workflow, [1]), folder=tmp_path)
    return asyncio.run(explorer.exhaustive(depth=1))


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def test_every_crash_point_of_the_child_protocol_is_clean(tmp_path: Path) -> None:
    """Goal: a depth-1 crash sweep over the parent and its child (every point of both,
    the child.* points included) finds no violation, and reaches the child's effect."""
    summary = _sweep(tmp_path)
    assert summary.failures == [], [str(v) for run in summary.failures for v in run.violations]
    rows = {row.name: row for row in summary.coverage.rows()}
    assert rows["bank.charge"].crashed > 0
    assert "SUCCEEDED" in summary.statuses


def test_a_cancel_and_a_signal_at_every_point_of_parent_and_child_are_clean(
    tmp_path: Path,
) -> None:
    """Goal: a cancel request on the parent at every point (before the child's start, while
    it runs, while the parent waits for it...) leaves every request answered, no effect after
    it, and the cascade's children ended: some runs end CANCELLED, none in violation."""
    explorer = Explorer(scenario_for(_family(), "order", [1]), folder=tmp_path)
    summary = asyncio.run(explorer.arrivals())
    assert summary.failures == [], [str(v) for run in summary.failures for v in run.violations]
    assert summary.statuses.get("CANCELLED", 0) > 0


def _start_then_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the child's row first, in its own transaction, under a key each attempt mints;
    the parent's step after, in another."""

    def fresh_key(parent_key: str, parent_id: str, run: int, seq: int) -> str:
        return f"{parent_key}/s{seq}/{uuid.uuid4().hex[:8]}"

    async def old_start(ctx: Any, handle: Any, definition: Any, spec: Any, *rest: Any) -> None:
        session = ctx._session
        step_name, input_text = rest
        await session.commit(StartInstance(new=_new(ctx, handle, definition, spec)))
        if faults.plan is not None:
            faults.point("child.after_start", instance=session.instance.business_key, seq=1)
        await session.commit(_step(ctx, handle, step_name, input_text))

    monkeypatch.setattr(children_module, "default_child_key", fresh_key)
    monkeypatch.setattr(children_module, "_start", old_start)


def _new(ctx: Any, handle: Any, definition: Any, spec: Any) -> Any:
    parent = ctx._session.instance
    return NewInstance(
        instance_id=handle.child_id,
        tenant=parent.tenant,
        workflow_name=definition.name,
        workflow_version=definition.version,
        fingerprint=definition.fingerprint,
        business_key=handle.key,
        input=ctx._session.codec.encode(spec["input"]),
        parent_instance_id=parent.instance_id,
        parent_run=RunNumber(parent.run),
        parent_seq=handle.seq,
    )


def _step(ctx: Any, handle: Any, step_name: str, input_text: str) -> Any:
    s = ctx._session
    return new_step(
        s.instance,
        handle.seq,
        StepEvent.START,
        kind=StepKind.CHILD,
        name=step_name,
        input=input_text,
        retry_policy=s.codec.encode(DEFAULT_STEP_RETRY.to_record()),
        now=s.clock.now(),
    )


def test_the_sweep_finds_a_second_child_with_the_fix_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: the oracle's one-child-per-position is not vacuous: with the start split in two
    transactions and a key minted per attempt, a crash between them leaves two children."""
    _start_then_step(monkeypatch)
    summary = _sweep(tmp_path)
    assert "one-child-per-position" in _found(summary), summary.figures()


def test_a_failing_parent_ends_after_its_wait_child_at_every_crash_point(tmp_path: Path) -> None:
    """Goal: a parent that fails once its "wait" child started ends FAILED only after the
    child ended, whichever point of parent or child a worker crashes at: the oracle's
    no-parent-ends-before-its-wait-children holds in every run."""
    summary = _sweep(tmp_path, "refused")
    assert summary.failures == [], [str(v) for run in summary.failures for v in run.violations]
    assert "FAILED" in summary.statuses


def test_a_cancelled_parent_ends_after_its_wait_child_at_every_point(tmp_path: Path) -> None:
    """Goal: a cancel request (or the awaited signal) on a parent with a "wait" child at every
    point of parent and child: some runs end CANCELLED, none before the child's ending."""
    explorer = Explorer(scenario_for(_family(), "held", [1]), folder=tmp_path)
    summary = asyncio.run(explorer.arrivals())
    assert summary.failures == [], [str(v) for run in summary.failures for v in run.violations]
    assert summary.statuses.get("CANCELLED", 0) > 0


def test_the_sweep_finds_a_parent_ending_first_with_the_wait_reverted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: the oracle's wait check is not vacuous: with the old rule (the wait children
    awaited only when the parent's code returns, not before a failure's or a cancellation's
    ending) the failing parent ends FAILED before its child, and the sweep says so."""
    awaited = children_module.await_children

    async def only_on_return(ctx: Any, *, cancellable: bool = True) -> None:
        if cancellable:  # the executor's call after the code returned
            await awaited(ctx, cancellable=cancellable)

    monkeypatch.setattr(children_module, "await_children", only_on_return)
    summary = _sweep(tmp_path, "refused")
    assert "no-parent-ends-before-its-wait-children" in _found(summary), summary.figures()
