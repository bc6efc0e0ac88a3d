"""A participant outage during lookups does not park work: a lookup that could not be asked is
no answer, and is asked again on the participant's lookup policy; only when that is spent does
the doubt go to a person.

Every order's charge is applied and its reply lost (so each effect is UNKNOWN and settled by the
bank's lookup); the lookup is down (connection refused) for a while, then back.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import ledgerflow as lf
from conditions import until
from ledgerflow.model.attempts import attempt_errors
from ledgerflow.participant import LookupAnswer

ORDERS = 40


class FlakyBank:
    def __init__(self, *, lookup_retry: lf.RetryPolicy | None = None) -> None:
        self.applied: Counter[str] = Counter()
        self.lookup_up = False
        self.refused = 0
        self.registry = lf.Registry()
        policy = {"lookup_retry": lookup_retry} if lookup_retry else {}
        bank = self.registry.add_participant(lf.Participant("bank", **policy))

        @bank.effect(classification="compensatable")
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            raise ConnectionResetError("reply lost after the charge was applied")

        @bank.lookup
        async def find(key: str, attempt: int) -> LookupAnswer:
            if not self.lookup_up:
                self.refused += 1
                raise ConnectionRefusedError("bank unreachable")
            return LookupAnswer.applied({"charged": key})

        @self.registry.workflow(name="order", version=1)
        async def order(ctx: lf.WorkflowContext, amount: int) -> Any:
            return await ctx.effect(charge, amount)


async def _orders(url: str, bank: FlakyBank, count: int, outage_refusals: int) -> list[str]:
    """Start ``count`` orders; keep the lookup down until it refused ``outage_refusals`` asks;
    return the instance ids once all have settled."""
    async with lf.Engine(url, bank.registry) as engine:
        worker = engine.worker(lease_seconds=5, poll_seconds=0.02, concurrency=count)
        running = asyncio.create_task(worker.run())
        try:
            ids = [
                (await engine.start("order", key=f"o-{n}", input=n)).instance_id
                for n in range(count)
            ]
            await until(lambda: bank.refused >= outage_refusals, what="the outage's refusals")
            bank.lookup_up = True
            for instance_id in ids:
                await engine.wait(instance_id, timeout=60)
            return ids
        finally:
            bank.lookup_up = True
            worker.stop()
            await running


def test_an_outage_of_the_lookup_parks_nothing(journal_url: str) -> None:
    """Goal: 40 orders whose outcomes are in doubt while the bank's lookup is unreachable for
    two asks of each (the default lookup policy asks 10 times over about a minute): none is
    parked, each charge applied once, each effect confirmed by the lookup, and the effect keeps
    the errors of the lookups that could not be asked."""
    bank = FlakyBank()
    ids = asyncio.run(_orders(journal_url, bank, ORDERS, outage_refusals=2 * ORDERS))

    async def read() -> list[lf.InstanceDetail]:
        async with lf.Engine(journal_url, bank.registry) as engine:
            return [await engine.detail(i) for i in ids]

    details = asyncio.run(read())
    statuses = Counter(d.instance.status.value for d in details)
    assert statuses == {"SUCCEEDED": ORDERS}
    assert sorted(set(bank.applied.values())) == [1]
    assert len(bank.applied) == ORDERS
    missed = [
        e
        for d in details
        for e in attempt_errors(d.effects[0].attempt_errors)
        if e["type"] == "ConnectionRefusedError"
    ]
    assert len(missed) >= ORDERS  # every instance asked at least once into the outage


def test_an_outage_longer_than_the_lookup_policy_goes_to_a_person(journal_url: str) -> None:
    """Goal: the other side: when the lookup stays unreachable through the whole lookup policy
    (3 asks here), the instance is parked for a person, saying the lookup could not be asked."""
    quick = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=10))
    bank = FlakyBank(lookup_retry=quick)

    async def main() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, bank.registry) as engine:
            started = await engine.start("order", key="o-1", input=1)
            await engine.worker(lease_seconds=5, poll_seconds=0.02).run(until_idle=True)
            return await engine.get(started.instance_id)

    record = asyncio.run(main())
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "effect_outcome_unknown"
    reason = record.reason or ""
    assert "its lookup could not be asked and the participant does not deduplicate" in reason
    assert "the lookup gave no verdict 3 times in a row, last: could not be asked" in reason
    assert bank.refused == 3
