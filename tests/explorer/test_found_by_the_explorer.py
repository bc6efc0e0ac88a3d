"""Bugs the fault explorer found, each pinned as a deterministic scenario.

Each test scripts the participant behaviour and the crash that exposed the bug, runs it with
the simulation, and checks the oracle and the exact ledger state.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.testing import Behavior, ScriptedParticipant, World
from ledgerflow.testing.plans import ScheduledPlan
from ledgerflow.testing.simulation import Scenario, simulate

TWO_TRIES = lf.RetryPolicy(attempts_max=2, backoff_initial=timedelta(milliseconds=1))


def _mailer_scenario(world: World) -> Scenario:
    registry = lf.Registry()
    mailer = ScriptedParticipant(
        "mailer",
        world,
        operations={"send": "forward-recovery-only"},
        deduplicates=True,
        retry=TWO_TRIES,
    )
    registry.add_participant(mailer.participant)
    send = mailer.effect("send")

    @registry.workflow(name="notify", version=1)
    async def notify(ctx: lf.WorkflowContext, to: str) -> Any:
        return await ctx.effect(send, {"to": to})

    mailer.script(Behavior.LATE, attempt=1)
    mailer.script(Behavior.REJECT, attempt=2)
    return Scenario(
        registry=registry,
        world=world,
        participants=[mailer],
        starts=[("notify", "n-1", "a@example.com")],
    )


def test_rejection_after_doubt_does_not_prove_failure(tmp_path: Path) -> None:
    """A late attempt 1 (still on its way) and a refused attempt 2 must not end FAILED.

    Found by random mode (seed 2 of the demo order workflow): the engine recorded FAILED on
    attempt 2's rejection, then attempt 1 arrived and applied. A rejection proves only that
    its own attempt was not applied; with attempt 1 in doubt and no lookup, the instance is
    parked for an operator, and the late application is then consistent with the ledger.
    """
    world = World()
    result = asyncio.run(
        simulate(lambda: _mailer_scenario(world), ScheduledPlan(), folder=tmp_path, label="r")
    )
    assert result.violations == []
    assert result.statuses == {"MANUAL_INTERVENTION": 1}
    assert len(world.applications) == 1
    assert world.applications[0].attempt == 1
