"""The fault explorer learns version drift: a worker with changed code appears mid-run.

After the first worker's first life (a crash at each fault point, in turn) the next lives run
other code for the same workflow version, and an operator upgrades what replays clean against
it (or, with no operator, the new code's worker adopts it). The oracle adds "never run on code
that was not proven compatible": an instance's code ran only on the code it started on, or on
code a replay of its own journal proved first, and the proof still holds at the end. A
breakage that lets a worker run any instance on whatever code it has (no fingerprint check)
is caught.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import breakages
import ledgerflow as lf
from ledgerflow.runtime.executor import Executor
from ledgerflow.testing import Explorer, RunResult, scenario_for
from ledgerflow.testing.drift import NEVER_UNPROVEN_CODE
from replay_shop import ORDER, shop

pytestmark = [pytest.mark.slow, pytest.mark.simulated]


def _sweep(edition: str, tmp_path: Path, *, upgrade: bool = True) -> list[RunResult]:
    runs: list[RunResult] = []
    explorer = Explorer(
        scenario_for(
            shop("v1").registry,
            "order",
            [ORDER, {**ORDER, "items": [9]}],
            drift=shop(edition).registry,
            upgrade_on_drift=upgrade,
        ),
        folder=tmp_path,
    )
    asyncio.run(explorer.exhaustive(depth=1, progress=runs.append))
    return runs


@pytest.mark.parametrize("edition", ["clean", "patched"])
def test_a_compatible_change_is_upgraded_mid_run_and_nothing_runs_unproven(
    edition: str, tmp_path: Path
) -> None:
    """``patched`` puts a new step behind ``ctx.patched``: an instance upgraded mid-run takes
    the patch where its journal ends, and every crash point of the first life is tried."""
    runs = _sweep(edition, tmp_path)
    assert [str(v) for run in runs for v in run.violations] == []
    assert sum(run.upgraded for run in runs) > 0  # the drift was met in flight, and moved


def _napping(edition: str) -> lf.Registry:
    """An order that holds stock, sleeps, and mails; the bug fix of the deploy guide (the
    "fixed" edition) changes only how long it sleeps, in its code: another fingerprint, and a
    started timer keeps its recorded due time, so the journals replay clean."""
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))
    mail = registry.add_participant(lf.Participant("mail", deduplicates=True))

    @stock.effect(classification="reversible")
    async def hold(call: lf.EffectCall) -> dict[str, Any]:
        return {"held": call.payload}

    @mail.effect(classification="forward-recovery-only")
    async def send(call: lf.EffectCall) -> dict[str, Any]:
        return {"sent": call.payload}

    if edition == "first":

        @registry.workflow(name="order", version=1)
        async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            await ctx.effect(hold, {"sku": order["sku"]})
            await ctx.sleep(3)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    else:

        @registry.workflow(name="order", version=1)
        async def fixed(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
            await ctx.effect(hold, {"sku": order["sku"]})
            await ctx.sleep(2)
            await ctx.effect(send, {"to": order["to"]})
            return "done"

    return registry


def test_with_no_operator_the_new_code_adopts_what_replays_clean(tmp_path: Path) -> None:
    """No operator upgrades: sleep(3) became sleep(2) and the old code's worker is gone. The
    new code's worker adopts each order asleep on the old code as it comes due, after its own
    clean replay, in the claim's transaction; a crash at every point of the run, before and
    after the adopting claim included, leaves nothing run on unproven code, nothing applied
    twice, every invariant holding."""
    runs: list[RunResult] = []
    explorer = Explorer(
        scenario_for(
            _napping("first"),
            "order",
            [ORDER, {**ORDER, "sku": "B-2"}],
            drift=_napping("fixed"),
            upgrade_on_drift=False,
        ),
        folder=tmp_path,
    )
    asyncio.run(explorer.exhaustive(depth=1, progress=runs.append))
    assert [str(v) for run in runs for v in run.violations] == []
    assert sum(run.upgraded for run in runs) > 0  # adopted in flight
    points = {h.split()[1] for run in runs for h in run.fired}
    assert {"adoption.before_adopt", "adoption.after_adopt"} <= points
    assert {s for run in runs for s in run.statuses} == {"SUCCEEDED"}


def test_a_divergent_change_moves_only_what_replays_clean(tmp_path: Path) -> None:
    """Nothing moves and nothing runs on the changed code. Work is routed by capability, so
    the changed worker never claims (let alone parks) an instance pinned to the old code:
    what did not replay clean stays RUNNING, untouched, for a worker with its own code, which
    this simulation never starts (in service the scan flags it ``no_capable_worker``, and a
    worker with the old code finishes it, settling an effect a crash left in flight). That is
    all the oracle finds: such an instance is still RUNNING, maybe with that effect; nothing
    is parked and nothing ran on unproven code."""
    runs = _sweep("repriced", tmp_path)
    found = [v for run in runs for v in run.violations]
    assert {v.invariant for v in found} <= {"no-stuck-instance", "no-lost-completion"}
    stuck = {v.instance_id for v in found if v.invariant == "no-stuck-instance"}
    assert {v.instance_id for v in found} == stuck
    for v in found:
        running = "still RUNNING" if v.invariant == "no-stuck-instance" else "a RUNNING instance"
        assert running in v.detail, str(v)
    # Only an instance whose journal did not reach the renamed first step yet replays clean
    # (and moves); every other one stays on its own code.
    assert sum(run.upgraded for run in runs) < 2 * len(runs)


def test_a_worker_that_runs_any_instance_on_its_code_is_caught(tmp_path: Path) -> None:
    with breakages.broken(breakages.ANY_CODE):
        runs = _sweep("clean", tmp_path, upgrade=False)
    found = {v.invariant for run in runs for v in run.violations}
    assert NEVER_UNPROVEN_CODE in found, found
    assert Executor._pinned_definition.__name__ == "_pinned_definition"  # put back
