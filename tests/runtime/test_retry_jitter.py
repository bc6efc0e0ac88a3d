"""Retries are jittered by the effect's identity, reproducibly, under the fake clock (issue 15).

A participant rejects the first attempt of every charge; the retry is scheduled a minute away
at most (so the worker releases the instance with a durable wake-up time and stops). The
recorded wake-up is the policy's jittered delay for that effect's key and attempt: it differs
from key to key, stays within the backoff, and is the same in a second run from scratch.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.errors import EffectRejectedError
from ledgerflow.model.ids import InstanceId, RunNumber, StepSeq
from ledgerflow.testing import FakeClock

BACKOFF = timedelta(seconds=60)
POLICY = lf.RetryPolicy(attempts_max=3, backoff_initial=BACKOFF, backoff_max=BACKOFF)
KEYS = [f"order-{n}" for n in range(8)]


def _registry() -> lf.Registry:
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank", deduplicates=True))

    @bank.effect(classification="compensatable", retry=POLICY)
    async def charge(call: lf.EffectCall) -> dict[str, Any]:
        raise EffectRejectedError("busy, try later", error_code="busy")

    @registry.workflow(name="pay", version=1)
    async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
        return await ctx.effect(charge, {"amount": amount})

    return registry


def _scheduled_pauses(folder: Path) -> dict[str, float]:
    """Start every key, run a worker until nothing is due; each effect's scheduled pause."""
    folder.mkdir()
    url = f"sqlite:///{folder / 'journal.db'}"

    async def run() -> dict[str, float]:
        async with lf.Engine(url, _registry(), clock=FakeClock()) as engine:
            started = [await engine.start("pay", key=key, input=5) for key in KEYS]
            await engine.worker(poll_seconds=0.01).run(until_nothing_due=True)
            pauses: dict[str, float] = {}
            for one in started:
                instance_id = InstanceId(one.instance_id)
                journal = engine.store.journal(instance_id, RunNumber(1))
                step, effect = journal.steps[StepSeq(1)], journal.effects[StepSeq(1)]
                assert step.status is lf.StepStatus.RETRY_SCHEDULED
                assert step.next_attempt_at is not None
                pauses[effect.idempotency_key] = step.next_attempt_at - step.updated_at
            return pauses

    return asyncio.run(run())


def test_retry_pauses_are_jittered_by_identity_and_reproducible(tmp_path: Path) -> None:
    """Goal: the pause before a retry is the policy's full-jitter delay for that effect's key
    and attempt: spread between instances, within the backoff, the same in every run.

    Method: two runs from scratch on a fake clock; in each, every scheduled pause equals
    ``POLICY.delay_before(2, identity=key)``, lies within [0, 60 s], and the pauses of the
    eight effects differ from one another; the second run schedules exactly the same pauses.
    """
    first = _scheduled_pauses(tmp_path / "one")
    for key, pause in first.items():
        expected = POLICY.delay_before(2, identity=key).total_seconds()
        assert abs(pause - expected) < 1e-6
        assert 0 <= pause <= BACKOFF.total_seconds()
    assert len({round(pause, 6) for pause in first.values()}) == len(KEYS)
    assert _scheduled_pauses(tmp_path / "two") == first
