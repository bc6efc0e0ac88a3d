"""Adoption of an instance whose effect is UNKNOWN when the old code's last worker dies, on
each backend (issue 23).

A charge is dispatched by a worker with the old code, which dies before the outcome is durable
(``effect.after_dispatch``); a second old-code worker takes it over once the lease lapses,
records the outcome as UNKNOWN and dies before its lookup (``effect.before_lookup``). No worker
with the old code is live any more. A worker with new code of the same version then:

- adopts it when the replay reaches the charge asking for the very same effect, and settles
  the UNKNOWN by the bank's lookup under the same key: the bank's own record shows the charge
  applied once, and the instance ends on the new code;
- does not adopt it when the new code asks for another effect there: it is flagged with the
  divergence and the UNKNOWN effect, left untouched, and a waiter's LF403 names both and the
  command that settles the effect.

The rule is the operator's too (``versions upgrade``): see ``tests/operators/test_upgrades.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model import detection
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.effect import EffectState, LookupAnswer
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime import faults
from ledgerflow.runtime.adoption import in_doubt_refusal
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash
from ledgerflow.runtime.replay import replay
from ledgerflow.storage import open_store

# A worker counts as gone once silent this long (the dead ones stop beating): for the new
# code's worker and for what a waiter is told (LEDGERFLOW_DETECTION).
SILENT = DetectionBounds(worker_silent_seconds=1.0)


@pytest.fixture(autouse=True)
def silent_workers_are_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERFLOW_DETECTION", "worker_silent_seconds=1")


@dataclass
class Bank:
    """The participant's own record: what it applied under each key, and what it was asked."""

    applied: Counter[str] = field(default_factory=Counter)
    lookups: list[str] = field(default_factory=list)


def code(edition: str, bank: Bank) -> lf.Registry:
    """Order v1 in one edition of its code: ``old``, ``fixed`` (another result, the same
    effects) or ``other`` (another charge at the charge's position)."""
    registry = lf.Registry()
    participant = registry.add_participant(lf.Participant("bank"))

    @participant.effect(classification="compensatable")
    async def charge(call: lf.EffectCall) -> dict[str, Any]:
        bank.applied[call.idempotency_key] += 1
        return {"charged": call.payload, "key": call.idempotency_key}

    @participant.lookup
    async def find(key: str, attempt: int) -> LookupAnswer:
        bank.lookups.append(key)
        if bank.applied[key]:
            return LookupAnswer.applied({"charged": "looked up", "key": key})
        return LookupAnswer.not_applied()

    register = registry.workflow(name="order", version=1)
    if edition == "old":

        @register
        async def order(ctx: lf.WorkflowContext, amount: int) -> str:
            await ctx.effect(charge, {"amount": amount})
            return "done"

    elif edition == "fixed":

        @register
        async def order(ctx: lf.WorkflowContext, amount: int) -> str:
            receipt = await ctx.effect(charge, {"amount": amount})
            return f"done, {receipt['charged']}"

    else:

        @register
        async def order(ctx: lf.WorkflowContext, amount: int) -> str:
            await ctx.effect(charge, {"amount": amount, "fee": 1})
            return "done"

    return registry


async def _dies_at(url: str, registry: lf.Registry, point: str) -> None:
    """A worker with ``registry``'s code that dies at fault point ``point`` for order o-1."""
    async with lf.Engine(url, registry) as engine:
        rule = FaultRule(point=point, action="crash", match={"instance": "o-1"})
        faults.install(FaultPlan([rule]))
        try:
            with pytest.raises(SimulatedCrash):
                await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)
        finally:
            faults.install(None)


def in_doubt(url: str, bank: Bank) -> str:
    """Order o-1 with its charge applied once and recorded UNKNOWN, no old-code worker left."""

    async def main() -> str:
        async with lf.Engine(url, code("old", bank)) as engine:
            instance_id = (await engine.start("order", key="o-1", input=5)).instance_id
        await _dies_at(url, code("old", bank), "effect.after_dispatch")
        await _dies_at(url, code("old", bank), "effect.before_lookup")
        return instance_id

    instance_id = asyncio.run(main())
    store = open_store(url)
    try:
        [effect] = store.effects(InstanceId(instance_id))
    finally:
        store.close()
    assert effect.state is EffectState.UNKNOWN
    assert bank.applied == {effect.idempotency_key: 1}
    assert bank.lookups == []
    return instance_id


def test_an_unknown_effect_the_new_code_asks_for_is_adopted_and_settled_by_lookup(
    journal_url: str,
) -> None:
    """Goal: the new code's worker adopts an instance whose charge is UNKNOWN because the
    replay reaches the charge asking for that very effect, settles it by the bank's lookup
    under the same key (applied once, never re-sent), and the instance ends on the new code."""
    bank = Bank()
    instance_id = in_doubt(journal_url, bank)
    fixed = code("fixed", bank)
    new = fixed.get("order", 1).fingerprint

    async def main() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, fixed) as engine:
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01, detection=SILENT)
            running = asyncio.create_task(worker.run())
            try:
                return await engine.wait(instance_id, timeout=30)
            finally:
                worker.stop()
                await running

    record = asyncio.run(main())
    assert (record.status, record.fingerprint) == (lf.InstanceStatus.SUCCEEDED, new)
    assert record.result_value == "done, looked up"  # settled by the lookup, run on new code
    store = open_store(journal_url)
    try:
        [effect] = store.effects(InstanceId(instance_id))
        [adopted] = store.audit_records(AuditQuery(instance_id=InstanceId(instance_id)))
    finally:
        store.close()
    assert effect.state is EffectState.CONFIRMED
    assert bank.applied == {effect.idempotency_key: 1}  # the bank's own record: once
    assert bank.lookups == [effect.idempotency_key]
    assert adopted.kind == "adopt"
    verdict = json.loads(adopted.evidence or "{}")
    assert (verdict["compatible"], verdict["reached_open"]) == (True, [1])


def test_an_unknown_effect_the_new_code_asks_otherwise_is_flagged_and_named(
    journal_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Goal: when the new code asks for another charge at the UNKNOWN charge's position, the
    instance is not adopted and not touched (still pinned, still UNKNOWN, nothing sent); it is
    flagged with the divergence and the effect in doubt, and a waiter's LF403 names both and
    the command that settles it instead of promising an adoption; the worker's unserved line
    counts it by that reason."""
    # The unserved count is said at every scan interval that changes it (or its refusals).
    monkeypatch.setenv("LEDGERFLOW_DETECTION", "worker_silent_seconds=1,scan_interval_seconds=0.2")
    bank = Bank()
    instance_id = in_doubt(journal_url, bank)
    other = code("other", bank)
    old = code("old", Bank()).get("order", 1).fingerprint

    async def main() -> str:
        async with lf.Engine(journal_url, other) as engine:
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
            running = asyncio.create_task(worker.run())
            try:
                await until(
                    lambda: [
                        f
                        for f in engine.store.open_flags(InstanceId(instance_id))
                        if f.reason_code == detection.REPLAY_DIVERGENCE
                    ],
                    what="the divergence flag",
                )
                with pytest.raises(lf.errors.NoCapableWorkerError) as caught:
                    await engine.result(instance_id, timeout=0.05)
                await until(
                    lambda: any(
                        "1 flagged replay_divergence" in r.getMessage() for r in caplog.records
                    ),
                    what="the unserved line naming the refusal",
                )
                return str(caught.value)
            finally:
                worker.stop()
                await running

    message = asyncio.run(main())
    store = open_store(journal_url)
    try:
        record = store.get_instance(InstanceId(instance_id))
        [effect] = store.effects(InstanceId(instance_id))
        [flag] = store.open_flags(InstanceId(instance_id))
    finally:
        store.close()
    assert record is not None
    assert record.fingerprint == old
    assert effect.state is EffectState.UNKNOWN
    assert bank.applied == {effect.idempotency_key: 1}
    assert bank.lookups == []
    assert "mismatch at position 1" in flag.evidence
    assert f"UNKNOWN effect bank.charge at position 1 (key {effect.idempotency_key})" in (
        flag.evidence
    )
    assert f"ledgerflow repair resolve-effect {instance_id} 1" in flag.evidence
    assert message.startswith("[LF403]")
    assert "does not replay against the live workers' code" in message
    assert "adopts it when it comes due" not in message


def test_the_rule_names_an_unknown_effect_the_replay_does_not_reach(journal_url: str) -> None:
    """Goal: the shared rule (``in_doubt_refusal``: adoption and ``versions upgrade``) lets an
    UNKNOWN effect through only at a position the replay reached asking for that effect, and
    otherwise names the effect, why, and the command that settles it."""
    bank = Bank()
    instance_id = in_doubt(journal_url, bank)
    fixed = code("fixed", bank)
    store = open_store(journal_url)
    try:
        record = store.get_instance(InstanceId(instance_id))
        assert record is not None
        journal = store.journal(record.instance_id, record.run)
    finally:
        store.close()
    definition = fixed.get("order", 1)
    verdict = asyncio.run(replay(definition, record, journal, codec=lf.JsonCodec(), registry=fixed))
    assert (verdict.compatible, verdict.reached_open) == (True, (1,))
    assert in_doubt_refusal(record, journal, verdict, code="fixed") is None
    unreached = type(verdict)(**{**verdict.to_json(), "reached_open": ()})
    refused = in_doubt_refusal(record, journal, unreached, code="fixed")
    assert refused is not None
    assert refused.startswith("effect bank.charge at position 1 (key ")
    assert "is UNKNOWN, and the replay against fixed does not reach it" in refused
    assert f"ledgerflow repair resolve-effect {instance_id} 1" in refused
    assert bank.applied == {journal.effects[next(iter(journal.effects))].idempotency_key: 1}
