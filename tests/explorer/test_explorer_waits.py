"""The explorer drives every wait: approvals from an approver and from someone refused, timeouts,
waits with no timeout, asynchronous effects called back both ways, seeds that replay their
choices, and a workflow that waits forever in a loop (bounded, and reported non-terminal).

The workflows here are small and their participants scripted twins (``scenario_for``), so each
test takes a second or two: the paths are few, the sweeps depth 1.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey
from ledgerflow.runtime.engine import instance_id_for
from ledgerflow.storage import open_store
from ledgerflow.testing import Explorer, scenario_for
from ledgerflow.testing.arrivals import REFUSED_SENDER
from ledgerflow.testing.plans import ScheduledPlan
from ledgerflow.testing.simulation import simulate


def _shop() -> lf.Registry:
    """Reserve, then wait an hour at most for alice's approval, then ship; and a payment
    service that completes its collections by callback."""
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))
    carrier = registry.add_participant(lf.Participant("carrier", deduplicates=True))
    psp = registry.add_participant(lf.Participant("psp", deduplicates=True))

    @stock.effect(classification="reversible", compensation="release")
    async def reserve(call: lf.EffectCall) -> Any:
        return {}

    @stock.compensation("release")
    async def release(call: lf.EffectCall) -> Any:
        return {}

    @carrier.effect(classification="forward-recovery-only")
    async def ship(call: lf.EffectCall) -> Any:
        return {}

    @psp.effect(classification="compensatable", compensation="refund", completes_by_callback=30)
    async def collect(call: lf.EffectCall) -> Any:
        return {}

    @psp.compensation("refund")
    async def refund(call: lf.EffectCall) -> Any:
        return {}

    @psp.lookup
    def find(key: Any, attempt: int) -> lf.LookupAnswer:
        return lf.LookupAnswer.unknown()

    @registry.workflow(name="approved", version=1)
    async def approved(ctx: lf.WorkflowContext, order: int) -> Any:
        await ctx.effect(reserve, {"order": order})
        decision = await ctx.wait_for_approval("approval", approvers=["alice"], timeout=3600)
        await ctx.effect(ship, {"order": order})
        return decision.sender

    @registry.workflow(name="collected", version=1)
    async def collected(ctx: lf.WorkflowContext, order: int) -> Any:
        await ctx.effect(reserve, {"order": order})
        return await ctx.effect(collect, {"order": order})

    @registry.workflow(name="ticker", version=1)
    async def ticker(ctx: lf.WorkflowContext, order: int) -> None:
        while True:
            await ctx.wait_for("tick")

    return registry


def test_an_approval_is_refused_from_a_stranger_and_taken_from_an_approver(
    tmp_path: Path,
) -> None:
    """Goal: at an approval the explorer sends an event from a sender the wait refuses, then
    one from an approver, through the engine's own delivery.

    Method: one fault-free run of ``approved``, its journal kept: the instance SUCCEEDED with
    alice as its approver; its inbox holds the stranger's event refused (not-approver) and
    alice's consumed by the wait; the run's one choice is recorded.
    """
    factory = scenario_for(_shop(), "approved", [1])
    result = asyncio.run(simulate(factory, ScheduledPlan(), folder=tmp_path, label="run"))
    assert result.ok, result.violations
    assert result.statuses == {"SUCCEEDED": 1}
    [decision] = result.decisions
    assert decision.options[decision.chosen].endswith("from alice")
    instance = instance_id_for(DEFAULT_TENANT, "approved", BusinessKey("sim-0-0"))
    store = open_store(f"sqlite:///{tmp_path / 'run.db'}")
    try:
        inbox = {d.sender: d for d in store.inbox(instance)}
        assert store.get_instance(instance).result == '"alice"'  # type: ignore[union-attr]
    finally:
        store.close()
    assert (inbox[REFUSED_SENDER].state, inbox[REFUSED_SENDER].refusal) == (
        "REJECTED",
        "not-approver",
    )
    assert inbox["alice"].state == "CONSUMED"


def test_every_path_through_an_approval_is_swept(tmp_path: Path) -> None:
    """Goal: the approval's two outcomes are two paths, and the crash sweep runs on each.

    Method: the paths of ``approved`` are the approval (SUCCEEDED, ship reached) and the
    timeout (COMPENSATED: the reservation released, ship never reached); the depth-1 sweep
    crashes on both, with no violation, and its statuses hold both endings.
    """
    explorer = Explorer(scenario_for(_shop(), "approved", [1]), folder=tmp_path)
    paths = asyncio.run(explorer.paths())
    assert [result.statuses for _, result in paths] == [{"SUCCEEDED": 1}, {"COMPENSATED": 1}]
    assert [d.options[d.chosen] for d in paths[1][1].decisions] == ["timeout"]
    summary = asyncio.run(explorer.exhaustive(depth=1))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.paths == 2
    assert {"SUCCEEDED", "COMPENSATED"} <= set(summary.statuses)
    rows = {row.name: row for row in summary.coverage.rows()}
    assert rows["carrier.ship"].crashed > 0
    assert rows["stock.release"].crashed > 0


def test_an_asynchronous_effect_is_called_back_both_ways(tmp_path: Path) -> None:
    """Goal: an effect that completes by callback gets its callback applied, not applied, or
    lost (the participant applied it, its callback never came), one path each.

    Method: the paths of ``collected``: applied (SUCCEEDED, one callback), not applied
    (COMPENSATED: the reservation released, one callback), lost (SUCCEEDED by the lookup after
    the deadline, no callback); a depth-1 sweep of all three finds no violation.
    """
    explorer = Explorer(scenario_for(_shop(), "collected", [1]), folder=tmp_path)
    paths = asyncio.run(explorer.paths())
    seen = [
        (d.options[d.chosen], result.statuses, result.outside.callbacks)
        for _, result in paths
        for d in result.decisions
    ]
    assert seen == [
        ("callback: applied", {"SUCCEEDED": 1}, 1),
        ("callback: not applied", {"COMPENSATED": 1}, 1),
        ("applied, callback lost", {"SUCCEEDED": 1}, 0),
    ]
    summary = asyncio.run(explorer.exhaustive(depth=1))
    assert summary.failures == [], summary.shortest_failure()
    assert summary.paths == 3


def test_a_seed_replays_its_choices(tmp_path: Path) -> None:
    """Goal: in random mode the choices come from the seed: the same seed makes the same
    choices (and faults), and over a handful of seeds both outcomes of the approval happen.

    Method: 3 instances of ``approved``; seed 4 run twice gives the same decisions, hits and
    statuses; seeds 0..5 chose the approval and the timeout each at least once.
    """
    explorer = Explorer(scenario_for(_shop(), "approved", [1], copies=3), folder=tmp_path)
    first = asyncio.run(explorer.run_seed(4))
    again = asyncio.run(explorer.run_seed(4))
    assert first.decisions
    assert first.decisions == again.decisions
    assert (first.hits, first.statuses) == (again.hits, again.statuses)
    chosen = {
        d.options[d.chosen]
        for seed in range(6)
        for d in asyncio.run(explorer.run_seed(seed)).decisions
    }
    assert "timeout" in chosen
    assert any(option.endswith("from alice") for option in chosen)


def test_a_workflow_waiting_in_a_loop_is_fed_up_to_the_bound_then_shown_waiting(
    tmp_path: Path,
) -> None:
    """Goal: a workflow that waits forever is given events up to the bound, then left WAITING,
    and the run counts it as non-terminal rather than looping or hiding it.

    Method: ``ticker`` waits for ``tick`` in a loop with no timeout: one fault-free run makes
    EXPLORER_DECISIONS_PER_INSTANCE_MAX choices, sends as many events, and ends with the
    instance WAITING, counted in the run's coverage as non-terminal; no violation.
    """
    factory = scenario_for(_shop(), "ticker", [1])
    result = asyncio.run(simulate(factory, ScheduledPlan(), folder=tmp_path, label="run"))
    assert result.ok, result.violations
    assert len(result.decisions) == limits.EXPLORER_DECISIONS_PER_INSTANCE_MAX
    assert result.outside.deliveries == limits.EXPLORER_DECISIONS_PER_INSTANCE_MAX
    assert result.statuses == {"WAITING": 1}
    assert result.coverage.non_terminal == 1
