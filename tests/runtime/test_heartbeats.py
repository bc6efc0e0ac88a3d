"""Effect heartbeats in one process, on both backends: an attempt that keeps beating outlives
its heartbeat timeout; one that falls silent (or raises) is cut off, its outcome UNKNOWN and
settled by the lookup, never FAILED by the cut itself; the cut counts as an attempt, and the
next attempt reads the last durable details. Killing and stopping real processes is in
``test_heartbeats_kill.py``.

The participant's own record (``applied``) is what the ledger is checked against: an attempt
that was cut off applied nothing (its work waits on an event the test never sets), so the
lookup's "not applied" is the truth and the re-dispatch under the same key is safe.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.errors import RegistrationError
from ledgerflow.participant import HeartbeatAnswer, LookupAnswer, RetryPolicy

# The driver's deadline moves with each write *sent*, so a beat must be sent within the
# timeout of the last one although the write between them is slow on a loaded machine: a
# row's work of 0.36 s leaves 0.64 s for a write (0.3 / 0.12 left 0.18 s, and a CI run under
# load once spent more). The throttle is a third of the timeout: every beat is written.
HEARTBEAT_SECONDS = 1.0
BEAT_EVERY_SECONDS = 0.36
QUICK_RETRY = RetryPolicy(attempts_max=3, backoff_initial=timedelta(0), jitter=False)


class Batch:
    """A long effect that settles ``rows`` rows, beating after each; ``stall_on`` maps an
    attempt to the row after which it falls silent (or, with ``raise_on``, raises)."""

    def __init__(
        self,
        *,
        rows: int,
        stall_on: dict[int, int] | None = None,
        raise_on: dict[int, int] | None = None,
        retry: RetryPolicy = QUICK_RETRY,
    ) -> None:
        self.applied: Counter[str] = Counter()
        self.seen: dict[int, Any] = {}
        self.answers: list[HeartbeatAnswer] = []
        self.never = asyncio.Event()
        self.registry = lf.Registry()
        bank = self.registry.add_participant(lf.Participant("bank"))

        @bank.effect(
            classification="compensatable",
            timeout_seconds=30,
            heartbeat_timeout=HEARTBEAT_SECONDS,
            retry=retry,
        )
        async def settle(call: lf.EffectCall) -> dict[str, Any]:
            self.seen[call.attempt] = call.last_heartbeat
            done = call.last_heartbeat or 0
            while done < rows:
                done += 1
                self.answers.append(await call.heartbeat(done))
                if (stall_on or {}).get(call.attempt) == done:
                    await self.never.wait()  # silent: cut off by the missed heartbeat
                if (raise_on or {}).get(call.attempt) == done:
                    # A second beat at once is throttled: only the raise writes it.
                    self.answers.append(await call.heartbeat(done + 0.5))
                    raise ConnectionError("the batch service went away")
                await asyncio.sleep(BEAT_EVERY_SECONDS)  # the row's work
            self.applied[call.idempotency_key] += 1
            return {"settled": done, "attempt": call.attempt}

        @bank.lookup
        async def find(key: str, attempt: int) -> LookupAnswer:
            if self.applied[key]:
                return LookupAnswer.applied({"via": "lookup"})
            return LookupAnswer.not_applied()

        @self.registry.workflow(name="batch", version=1)
        async def batch(ctx: lf.WorkflowContext, n: int) -> Any:
            return await ctx.effect(settle, n)


async def _run(url: str, batch: Batch) -> lf.InstanceDetail:
    async with lf.Engine(url, batch.registry) as engine:
        worker = engine.worker(lease_seconds=5, poll_seconds=0.02)
        running = asyncio.create_task(worker.run())
        try:
            started = await engine.start("batch", key="b-1", input=5)
            await engine.wait(started.instance_id, timeout=30)
            return await engine.detail(started.instance_id)
        finally:
            worker.stop()
            await running


def _effect_timeline(detail: lf.InstanceDetail) -> list[tuple[str | None, str]]:
    return [(e.from_state, e.to_state) for e in detail.timeline if e.subject == "effect:1"]


def test_an_effect_that_keeps_beating_outlives_its_heartbeat_timeout(journal_url: str) -> None:
    """Goal: heartbeats keep a long attempt alive: five rows of 0.36 s each (1.8 s, nearly twice
    the 1 s heartbeat timeout) confirm on the first attempt, with no UNKNOWN on the way, and
    the ledger keeps the last durable details."""
    batch = Batch(rows=5)
    detail = asyncio.run(_run(journal_url, batch))
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED
    [effect] = detail.effects
    assert _effect_timeline(detail) == [("NEW", "INTENDED"), ("INTENDED", "CONFIRMED")]
    assert (effect.attempt, effect.heartbeat_attempt) == (1, 1)
    assert json.loads(effect.heartbeat_details or "null") == 5
    # The first beat follows the write made at dispatch at once: throttled, kept, written
    # with the next; every later one comes a throttle's length after the last write.
    assert [a.written for a in batch.answers] == [False, True, True, True, True]
    assert not any(a.cancel_requested for a in batch.answers)
    assert list(batch.applied.values()) == [1]


def test_a_silent_attempt_is_cut_off_unknown_settled_by_lookup_and_counted(
    journal_url: str,
) -> None:
    """Goal: a missed heartbeat makes the outcome UNKNOWN, never FAILED; the lookup settles it
    before the same key is sent again; the cut counts as an attempt; the next attempt starts
    from the last durable details.

    Method: attempt 1 beats rows 1 and 2, then falls silent. The timeline is INTENDED ->
    UNKNOWN -> INTENDED -> CONFIRMED, the UNKNOWN names the missed heartbeat, attempt 2 saw
    details 2 and finished rows 3 to 5, and the participant applied the batch once.
    """
    batch = Batch(rows=5, stall_on={1: 2})
    detail = asyncio.run(_run(journal_url, batch))
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED
    [effect] = detail.effects
    assert _effect_timeline(detail) == [
        ("NEW", "INTENDED"),
        ("INTENDED", "UNKNOWN"),
        ("UNKNOWN", "INTENDED"),
        ("INTENDED", "CONFIRMED"),
    ]
    assert effect.attempt == 2
    assert "HeartbeatMissedError" in (effect.attempt_errors or "")
    assert batch.seen == {1: None, 2: 2}
    assert json.loads(effect.evidence or "null") == {"settled": 5, "attempt": 2}
    assert list(batch.applied.values()) == [1]


def test_attempts_cut_off_use_the_retry_budget(journal_url: str) -> None:
    """Goal: a step cut off by its heartbeat again and again does not re-run forever: each cut
    is an attempt, and when the budget (3) is spent and the lookup proves nothing applied, the
    effect fails as proven (the workflow sees EffectFailedError; the instance FAILED with
    nothing committed)."""
    batch = Batch(rows=5, stall_on={1: 1, 2: 1, 3: 1})
    detail = asyncio.run(_run(journal_url, batch))
    [effect] = detail.effects
    assert effect.state is lf.EffectState.FAILED
    assert effect.attempt == 3
    assert sorted(batch.seen) == [1, 2, 3]
    assert "no attempt left" in (effect.reason or "")
    assert detail.instance.status is lf.InstanceStatus.FAILED
    assert not batch.applied


def test_details_kept_by_the_throttle_are_written_when_the_effect_raises(
    journal_url: str,
) -> None:
    """Goal: the throttle never loses progress: attempt 1 beats 1 (throttled: the dispatch just
    wrote), 2 (written), then at once 2.5 (throttled), then raises; the raise writes 2.5
    before the outcome, and attempt 2 reads it (Temporal's sdk-java#1965 gave the next attempt
    older details)."""
    batch = Batch(rows=4, raise_on={1: 2})
    detail = asyncio.run(_run(journal_url, batch))
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED
    assert batch.seen[2] == 2.5
    assert [a.written for a in batch.answers[:3]] == [False, True, False]
    [effect] = detail.effects
    assert effect.attempt == 2
    assert "ConnectionError" in (effect.attempt_errors or "")


def test_a_heartbeat_answers_that_a_cancel_was_requested(journal_url: str) -> None:
    """Goal: a cancel request reaches a long effect through its heartbeat's answer; the effect
    may then stop early, and returning evidence confirms what it did."""
    seen: list[bool] = []
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank"))

    @bank.effect(classification="compensatable", timeout_seconds=30, heartbeat_timeout=1.0)
    async def settle(call: lf.EffectCall) -> dict[str, Any]:
        while True:
            answer = await call.heartbeat(len(seen))
            seen.append(answer.cancel_requested)
            if answer.cancel_requested:
                return {"stopped_after": len(seen)}
            await asyncio.sleep(0.05)

    @registry.workflow(name="batch", version=1)
    async def batch_workflow(ctx: lf.WorkflowContext, n: int) -> Any:
        return await ctx.effect(settle, n)

    async def scenario() -> lf.InstanceDetail:
        async with lf.Engine(journal_url, registry) as engine:
            worker = engine.worker(lease_seconds=0.6, poll_seconds=0.02)
            running = asyncio.create_task(worker.run())
            try:
                started = await engine.start("batch", key="c-1", input=1)
                await until(lambda: seen, what="the first heartbeat")
                await engine.cancel(started.instance_id, reason="stop the batch")
                await engine.wait(started.instance_id, timeout=30)
                return await engine.detail(started.instance_id)
            finally:
                worker.stop()
                await running

    detail = asyncio.run(scenario())
    assert seen[-1] is True
    assert not any(seen[:-1])
    [effect] = detail.effects
    assert effect.state is lf.EffectState.CONFIRMED
    assert json.loads(effect.evidence or "null") == {"stopped_after": len(seen)}
    # Nothing was left to stop after the effect: the request is overtaken by the ending.
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED


def test_a_heartbeat_timeout_is_declared_on_an_async_effect_within_its_timeout() -> None:
    """Goal: a heartbeat timeout that cannot work is refused where it is declared."""
    bank = lf.Participant("bank")
    with pytest.raises(RegistrationError, match="longer than timeout_seconds"):
        bank.effect(classification="reversible", timeout_seconds=5, heartbeat_timeout=10)(_async)
    with pytest.raises(RegistrationError, match="async def"):
        bank.effect(classification="reversible", heartbeat_timeout=1, operation="s")(_sync)
    with pytest.raises(RegistrationError, match="positive"):
        bank.effect(classification="reversible", heartbeat_timeout=0, operation="z")(_async)
    declared = bank.effect(classification="reversible", heartbeat_timeout=2, operation="ok")(_async)
    assert declared.describe()["heartbeat_timeout_seconds"] == 2.0


async def _async(call: lf.EffectCall) -> None:
    return None


def _sync(call: lf.EffectCall) -> None:
    return None
