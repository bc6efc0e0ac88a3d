"""An effect's deadline is enforced even against participant code that ignores cancellation:
at the deadline the outcome is UNKNOWN, settled by evidence; a later answer from that attempt
is kept as evidence and never completes the effect on its own.

The participant applies the charge at once (its own record shows it), then holds its answer:
it catches the cancellation at the deadline and answers only when the test lets it, after the
engine has settled the effect.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import ledgerflow as lf
from conditions import until
from ledgerflow.participant import LookupAnswer

DEADLINE_SECONDS = 0.3


class StubbornBank:
    """Applies, then answers only when ``answer`` is set, whatever the engine cancels."""

    def __init__(self, *, lookup: bool) -> None:
        self.applied: Counter[str] = Counter()
        self.answered = asyncio.Event()
        self.answer = asyncio.Event()
        self.registry = lf.Registry()
        bank = self.registry.add_participant(lf.Participant("bank"))

        @bank.effect(classification="compensatable", timeout_seconds=DEADLINE_SECONDS)
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            while not self.answer.is_set():
                try:
                    await self.answer.wait()
                except asyncio.CancelledError:
                    continue  # Ignores the engine's cancellation on purpose.
            self.answered.set()
            return {"via": "dispatch", "key": call.idempotency_key}

        if lookup:

            @bank.lookup
            async def find(key: str, attempt: int) -> LookupAnswer:
                if self.applied[key]:
                    return LookupAnswer.applied({"via": "lookup", "key": key})
                return LookupAnswer.not_applied()

        @self.registry.workflow(name="pay", version=1)
        async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
            return await ctx.effect(charge, amount)


async def _settle(url: str, bank: StubbornBank) -> tuple[lf.InstanceDetail, lf.Delivery]:
    """Run until the effect is settled (no longer INTENDED/UNKNOWN in doubt), then let the
    participant answer and return the ledger with the late answer it kept."""
    async with lf.Engine(url, bank.registry) as engine:
        worker = engine.worker(lease_seconds=5, poll_seconds=0.02)
        running = asyncio.create_task(worker.run())
        try:
            started = await engine.start("pay", key="p-1", input=5)
            record = await engine.wait(started.instance_id, timeout=30)
            assert record.status is not lf.InstanceStatus.RUNNING
            bank.answer.set()
            await until(lambda: bank.answered.is_set(), what="the late answer")
            key = (await engine.detail(started.instance_id)).effects[0].idempotency_key
            late = await until(
                lambda: _late_answer(engine, started.instance_id, key),
                what="the kept late answer",
            )
            return await engine.detail(started.instance_id), late
        finally:
            bank.answer.set()  # Whatever failed, the participant may end now.
            worker.stop()
            await running


async def _late_answer(engine: lf.Engine, instance_id: str, key: str) -> lf.Delivery | None:
    inbox = (await engine.detail(instance_id)).inbox
    return next((d for d in inbox if d.event_id == f"late-answer:{key}:1"), None)


def _effect_timeline(detail: lf.InstanceDetail) -> list[tuple[str | None, str]]:
    return [(e.from_state, e.to_state) for e in detail.timeline if e.subject == "effect:1"]


def test_a_late_answer_never_confirms_the_effect_the_lookup_does(journal_url: str) -> None:
    """Goal: with a lookup, the effect is confirmed by the lookup's evidence, not by the answer
    the participant gave after the deadline.

    Method: deadline 0.3 s; the participant applied the charge and holds its answer. The
    timeline is INTENDED -> UNKNOWN -> CONFIRMED, the evidence is the lookup's, the charge was
    applied once, and the late answer is in the inbox, REJECTED as late, with its payload.
    """
    bank = StubbornBank(lookup=True)
    detail, late = asyncio.run(_settle(journal_url, bank))
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED
    [effect] = detail.effects
    assert _effect_timeline(detail) == [
        ("NEW", "INTENDED"),
        ("INTENDED", "UNKNOWN"),
        ("UNKNOWN", "CONFIRMED"),
    ]
    assert json.loads(effect.evidence or "null")["via"] == "lookup"
    assert "deadline" in (effect.reason or "") or any(
        "deadline" in (e.detail or "") for e in detail.timeline
    )
    assert (late.state, late.refusal) == ("REJECTED", "late")
    assert json.loads(late.payload) == {
        "attempt": 1,
        "answer": {"via": "dispatch", "key": effect.idempotency_key},
    }
    assert list(bank.applied.values()) == [1]


def test_without_lookup_or_deduplication_the_doubt_goes_to_a_person(journal_url: str) -> None:
    """Goal: with nothing that can prove the outcome, the deadline parks the instance with the
    effect UNKNOWN; the late answer is there for the operator, and changed nothing."""
    bank = StubbornBank(lookup=False)
    detail, late = asyncio.run(_settle(journal_url, bank))
    assert detail.instance.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert detail.instance.reason_code == "effect_outcome_unknown"
    [effect] = detail.effects
    assert effect.state is lf.EffectState.UNKNOWN
    assert _effect_timeline(detail) == [("NEW", "INTENDED"), ("INTENDED", "UNKNOWN")]
    assert (late.state, late.refusal) == ("REJECTED", "late")
