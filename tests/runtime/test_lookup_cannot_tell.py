"""A lookup that answers "cannot tell" is asked again on the participant's lookup policy, and
when that is spent the effect goes to a person, even at a participant that deduplicates: its
own word that it cannot vouch for the key beats its declared deduplication (it may have
forgotten the key, and the same key again would then apply twice).

The bank applies the charge and its reply is lost, so the effect is UNKNOWN and settled by the
bank's lookup; the lookup answers ``unknown`` as long as the test says.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import ledgerflow as lf
from ledgerflow.participant import LookupAnswer

QUICK = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=10))


class ForgetfulBank:
    """A deduplicating bank whose lookup cannot tell for its first ``untold`` asks."""

    def __init__(self, *, untold: int, takes_sent_at: bool = False) -> None:
        self.applied: Counter[str] = Counter()
        self.asks = 0
        self.sent_at: list[float | None] = []
        self.dispatched_at: list[float] = []
        self.registry = lf.Registry()
        bank = self.registry.add_participant(
            lf.Participant("bank", deduplicates=True, lookup_retry=QUICK)
        )

        @bank.effect(classification="compensatable")
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.dispatched_at.append(time.time())
            self.applied[call.idempotency_key] += 1
            raise ConnectionResetError("reply lost after the charge was applied")

        def answer(key: str) -> LookupAnswer:
            self.asks += 1
            if self.asks <= untold:
                return LookupAnswer.unknown(reason="key store restored from an older backup")
            return LookupAnswer.applied({"charged": key})

        if takes_sent_at:

            @bank.lookup
            async def find_since(key: str, attempt: int, *, sent_at: float | None) -> Any:
                self.sent_at.append(sent_at)
                return answer(key)
        else:

            @bank.lookup
            async def find(key: str, attempt: int) -> LookupAnswer:
                return answer(key)

        @self.registry.workflow(name="order", version=1)
        async def order(ctx: lf.WorkflowContext, amount: int) -> Any:
            return await ctx.effect(charge, amount)


def _order(url: str, bank: ForgetfulBank) -> lf.InstanceDetail:
    async def main() -> lf.InstanceDetail:
        async with lf.Engine(url, bank.registry) as engine:
            started = await engine.start("order", key="o-1", input=1)
            await engine.worker(lease_seconds=5, poll_seconds=0.02).run(until_idle=True)
            return await engine.detail(started.instance_id)

    return asyncio.run(main())


def test_a_lookup_that_cannot_tell_is_asked_again_until_it_can(journal_url: str) -> None:
    """Goal: "cannot tell" is not a verdict: asked again on the lookup policy, each ask
    durable, and a later "applied" confirms the effect without sending the key again.

    Method: the lookup cannot tell twice, then answers applied (3 asks allowed): the order
    succeeds with the lookup's evidence, the charge was sent and applied once, and the timeline
    shows the two asks that could not tell, with the bank's reason."""
    bank = ForgetfulBank(untold=2)
    detail = _order(journal_url, bank)
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED, detail.instance.reason
    [effect] = detail.effects
    assert effect.state is lf.EffectState.CONFIRMED
    assert list(bank.applied.values()) == [1]
    assert bank.asks == 3
    untold = [e.detail or "" for e in detail.timeline if "cannot tell" in (e.detail or "")]
    assert len(untold) == 2
    assert all("key store restored from an older backup" in text for text in untold)
    assert "lookup 1 of 3 cannot tell" in untold[0]


def test_a_lookup_that_still_cannot_tell_goes_to_a_person_despite_dedupe(
    journal_url: str,
) -> None:
    """Goal: at a deduplicating participant, a lookup that still cannot tell once its policy is
    spent parks the instance instead of sending the same key again, which would charge twice
    at a participant that forgot the key.

    Method: the lookup cannot tell on every ask (3 allowed): the instance is parked in
    MANUAL_INTERVENTION, "lookup cannot tell" with the bank's reason, the effect UNKNOWN, the
    charge sent once (never re-dispatched) and the lookup asked 3 times."""
    bank = ForgetfulBank(untold=1_000)
    detail = _order(journal_url, bank)
    record = detail.instance
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "effect_outcome_unknown"
    reason = record.reason or ""
    assert "lookup cannot tell: key store restored from an older backup" in reason
    assert "the lookup gave no verdict 3 times in a row" in reason
    [effect] = detail.effects
    assert (effect.state, effect.attempt) == (lf.EffectState.UNKNOWN, 1)
    assert list(bank.applied.values()) == [1]
    assert bank.asks == 3


def test_a_lookup_naming_sent_at_learns_when_the_key_was_first_sent(journal_url: str) -> None:
    """Goal: a lookup that takes ``sent_at`` is given when the key was first sent: never later
    than the first dispatch, and the same on every ask.

    Method: a lookup with a ``sent_at`` keyword, unknown once then applied: both asks got the
    same time, between the order's start and the charge's dispatch (the wall clock)."""
    before = time.time()
    bank = ForgetfulBank(untold=1, takes_sent_at=True)
    detail = _order(journal_url, bank)
    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED, detail.instance.reason
    assert len(bank.sent_at) == 2
    first, again = bank.sent_at
    assert first is not None
    assert first == again
    assert before <= first <= bank.dispatched_at[0]
