"""Lost wake-ups, for the tests that land an arrival between a read and a park (issue 22).

- :data:`registry`: the workflows each path needs (two waits, one wait, a loop of waits, a
  sleep, an asynchronous effect completed by callback), importable by worker processes too
  (``lost_wakeups:registry``: this folder is on their path);
- :class:`ArriveAt`: a fault plan that makes something arrive, through another connection, at
  the first hit of a named point (between a worker's read and the park it decides from);
- :func:`revert_arrival_flag`: the park of before the fix. A park then wrote its wake-up time
  whatever had arrived since the owner read the inbox and the cancel request, so an arrival
  between that read and the park was slept through. It puts those statements back into the
  named SQL a store loads (the seam the fix lives in: no switch in the shipped engine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.runtime import faults
from ledgerflow.storage import queries

TICKS = 5

registry = lf.Registry()
bank = registry.add_participant(lf.Participant("bank", deduplicates=True))


@bank.effect(classification="forward-recovery-only", completes_by_callback=3600)
async def transfer(call: lf.EffectCall) -> dict[str, Any]:
    # Accepted now; the bank calls back (the test, from outside) with the outcome.
    return {"accepted": call.idempotency_key}


@registry.workflow(name="two", version=1)
async def two(ctx: lf.WorkflowContext, _: None) -> list[Any]:
    first = await ctx.wait_for("a")
    second = await ctx.wait_for("b")
    return [first.payload, second.payload]


@registry.workflow(name="one", version=1)
async def one(ctx: lf.WorkflowContext, _: None) -> Any:
    return (await ctx.wait_for("a")).payload


@registry.workflow(name="loop", version=1)
async def loop(ctx: lf.WorkflowContext, _: None) -> list[Any]:
    return [(await ctx.wait_for("tick")).payload for _ in range(TICKS)]


@registry.workflow(name="nap", version=1)
async def nap(ctx: lf.WorkflowContext, _: None) -> str:
    await ctx.step("prepare", lambda: "ready")
    await ctx.sleep(3600)
    return "rested"


@registry.workflow(name="pay", version=1)
async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
    return await ctx.effect(transfer, {"amount": amount})


class ArriveAt(faults.FaultPlan):
    """At the first hit of ``point`` (for the instance of business key ``key``, when given):
    run ``arrive`` (another connection's transaction), then let the worker go on to its
    commit."""

    def __init__(self, point: str, arrive: Callable[[], object], *, key: str | None = None) -> None:
        super().__init__(rules=[])
        self.point, self.key, self.arrive = point, key, arrive
        self.arrived = 0

    def hit(self, name: str, where: dict[str, Any]) -> None:
        mine = self.key is None or where.get("instance") == self.key
        if name == self.point and mine and not self.arrived:
            self.arrived += 1
            self.arrive()


_OLD_RELEASE = """UPDATE lf_instances
SET owner = NULL, lease_expires_at = NULL, available_at = :available_at, updated_at = :now
WHERE instance_id = :instance_id AND generation = :generation"""


def revert_arrival_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened from now on park as before the fix (the flag is still written, unread)."""
    load = queries.load

    def old_load(dialect: str) -> dict[str, str]:
        loaded = dict(load(dialect))
        text = _OLD_RELEASE
        loaded["release_instance"] = queries.to_pyformat(text) if dialect == "postgres" else text
        return loaded

    monkeypatch.setattr(queries, "load", old_load)
