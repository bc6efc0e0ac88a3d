"""Each fault class the explorer learned is proven on the demo order workflow: with the fix it
checks reverted, the explorer finds the violation; with the fix in place, the same runs are
clean.

The classes: a store stall longer than the lease while a delivery is held (one copy of an
instance at a time); a cancel request and a signal arriving at every point of an instance's
life (each ends with an outcome the caller can read; no new effect after the request); a
failure's cause kept to the end; a participant that ignores the cancellation at the deadline
and answers late (the late answer never confirms); an unreachable lookup (doubt parked only
when the lookup policy is spent); a signal landing between a wait's read of the inbox and its
park (no lost wake-up, on a workflow of its own: the order has no wait). Each revert restores
the old behaviour through a seam (monkeypatching the store, its named SQL or the runtime
function that carries the fix), never a switch in the shipped engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.demo.order import registry, sample_order
from ledgerflow.errors import WaitTimeoutError
from ledgerflow.ledger.records import Commit, EffectRecord, InstanceRecord, InstanceWrite
from ledgerflow.model.effect import LookupAnswer
from ledgerflow.runtime import effect_asks as asks_module
from ledgerflow.runtime.calls import call_user
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.effects import EffectDriver
from ledgerflow.runtime.worker import Worker, _Driven
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.testing import Behavior, Explorer, Summary, scenario_for
from lost_wakeups import revert_arrival_flag

pytestmark = [pytest.mark.slow, pytest.mark.simulated]

SEEDS = range(6)


def _found(summary: Summary) -> set[str]:
    return {v.invariant for run in summary.failures for v in run.violations}


def _orders(tmp_path: Path, count: int = 3, copies: int = 2) -> Explorer:
    factory = scenario_for(
        registry, "order", [sample_order(n) for n in range(1, count + 1)], copies=copies
    )
    return Explorer(factory, folder=tmp_path)


# -- the reverts ------------------------------------------------------------------------------


def _claim_ignoring_what_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a claim could hand a worker an instance it was still driving, and the worker
    started it beside the copy that ran (both layers of the fix are reverted)."""
    claim = SqlStore.claim

    def old_claim(self: SqlStore, **kwargs: Any) -> Any:
        return claim(self, **{**kwargs, "running": ()})

    def old_start(self: Worker, record: InstanceRecord, *, held_until: float) -> None:
        task = asyncio.create_task(self.executor.drive(record), name=record.instance_id)
        self._running[record.instance_id] = _Driven(task, record.generation, held_until)
        task.add_done_callback(functools.partial(self._finished, record.instance_id))

    monkeypatch.setattr(SqlStore, "claim", old_claim)
    monkeypatch.setattr(Worker, "_start", old_start)


def _endings_settling_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: an ending left cancel requests and pending events as they were."""
    monkeypatch.setattr(SqlStore, "_settle_requests", lambda self, ending: None)


def _new_steps_ignoring_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a new effect was intended whatever cancel request the store held."""
    monkeypatch.setattr(SqlStore, "_no_cancel_request", lambda self, commit: None)


def _causes_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: no ending recorded what led to it."""
    write_instance = SqlStore._write_instance

    def old_write(
        self: SqlStore, write: InstanceWrite, commit: Commit, now: float, **kwargs: Any
    ) -> None:
        write_instance(self, dataclasses.replace(write, cause=None), commit, now, **kwargs)

    monkeypatch.setattr(SqlStore, "_write_instance", old_write)


def _late_answers_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: asyncio.wait_for's rule: a call cancelled at its deadline that returns a value
    anyway has that value taken as its answer."""

    async def like_wait_for(
        function: Callable[..., Any],
        *args: Any,
        seconds: float,
        clock: Clock,
        inline: bool = False,
        on_late: Callable[[Any], None] | None = None,
        heartbeat_due: Callable[[], float] | None = None,  # no heartbeat in this scenario
        heartbeat_seconds: float | None = None,
    ) -> Any:
        call = asyncio.ensure_future(call_user(function, *args, inline=inline))
        alarm = clock.alarm(clock.now() + seconds)
        await asyncio.wait([call, alarm], return_when=asyncio.FIRST_COMPLETED)
        alarm.cancel()
        if not call.done():
            call.cancel()
            await asyncio.wait([call])
            if call.cancelled():
                raise TimeoutError(f"no answer within {seconds}s")
        return call.result()

    monkeypatch.setattr(asks_module, "call_by_deadline", like_wait_for)


def _parks_ignoring_arrivals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a park wrote its wake-up time whatever arrived after the owner's read."""
    revert_arrival_flag(monkeypatch)


def _unreachable_lookup_is_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a lookup that could not be asked counted as "cannot tell" at once."""

    async def old_lookup(
        self: EffectDriver, effect: EffectRecord
    ) -> tuple[LookupAnswer | None, str]:
        answer, unavailable = await self._ask(effect.attempt)
        if unavailable is not None:
            return LookupAnswer.unknown(), f"; the lookup failed: {unavailable}"
        return answer, ""

    monkeypatch.setattr(EffectDriver, "_lookup", old_lookup)


# -- the runs ----------------------------------------------------------------------------------


def _stalls(tmp_path: Path) -> Summary:
    return asyncio.run(
        _orders(tmp_path).random(SEEDS, misbehaviour={Behavior.STALL: 0.3}, lookup_unreachable=0)
    )


def _arrivals(tmp_path: Path) -> Summary:
    return asyncio.run(_orders(tmp_path, count=1, copies=1).arrivals())


def _approvals() -> lf.Registry:
    approvals = lf.Registry()

    @approvals.workflow(name="approval", version=1)
    async def approval(ctx: lf.WorkflowContext, order: int) -> Any:
        try:
            decision = await ctx.wait_for("approved", timeout=600)
        except WaitTimeoutError:
            return "timed out"
        return decision.payload

    return approvals


def _arrivals_racing_a_wait(tmp_path: Path) -> Summary:
    """The signal that arrives is the one the wait takes: at every point, including between
    the wait's read of the inbox and its park."""
    factory = scenario_for(_approvals(), "approval", [1], signal="approved")
    return asyncio.run(Explorer(factory, folder=tmp_path).arrivals())


def _final_rejections(tmp_path: Path) -> Summary:
    return asyncio.run(
        _orders(tmp_path).random(
            SEEDS, misbehaviour={Behavior.REJECT_FINAL: 0.2}, lookup_unreachable=0
        )
    )


def _stubborn(tmp_path: Path) -> Summary:
    return asyncio.run(
        _orders(tmp_path).random(SEEDS, misbehaviour={Behavior.STUBBORN: 0.3}, lookup_unreachable=0)
    )


def _lookup_outages(tmp_path: Path) -> Summary:
    return asyncio.run(
        _orders(tmp_path).random(
            SEEDS, misbehaviour={Behavior.LOSE_REPLY: 0.3}, lookup_unreachable=0.5
        )
    )


CASES = {
    "stall past the lease": (_claim_ignoring_what_runs, _stalls, "one-copy-at-a-time"),
    "cancel at every point": (_endings_settling_nothing, _arrivals, "cancel-request-answered"),
    "signal at every point": (_endings_settling_nothing, _arrivals, "event-answered"),
    "effect after a cancel": (
        _new_steps_ignoring_requests,
        _arrivals,
        "no-new-effect-after-cancel",
    ),
    "signal between a read and its park": (
        _parks_ignoring_arrivals,
        _arrivals_racing_a_wait,
        "no-lost-wakeup",
    ),
    "cause of an ending": (_causes_not_kept, _final_rejections, "ending-names-its-cause"),
    "late answer": (_late_answers_taken, _stubborn, "late-answer-never-confirms"),
    "lookup outage": (
        _unreachable_lookup_is_an_answer,
        _lookup_outages,
        "doubt-parked-only-when-lookups-are-spent",
    ),
}


@pytest.fixture
def reverted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    revert, _, _ = CASES[request.param]
    revert(monkeypatch)
    name: str = request.param
    return name


@pytest.mark.parametrize("reverted", list(CASES), indirect=True)
def test_the_explorer_finds_the_class_with_its_fix_reverted(reverted: str, tmp_path: Path) -> None:
    """With the fix reverted, the explorer's runs for the class find its violation."""
    _, explore, invariant = CASES[reverted]
    summary = explore(tmp_path)
    assert invariant in _found(summary), (reverted, summary.figures())


@pytest.mark.parametrize(
    "explore",
    [_stalls, _arrivals, _arrivals_racing_a_wait, _final_rejections, _stubborn, _lookup_outages],
)
def test_the_same_runs_are_clean_with_the_fixes(
    explore: Callable[[Path], Summary], tmp_path: Path
) -> None:
    summary = explore(tmp_path)
    assert summary.failures == [], [str(v) for run in summary.failures for v in run.violations]
