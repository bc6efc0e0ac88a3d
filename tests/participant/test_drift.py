"""Participant drift: a participant that changes under the engine is never silently believed.

The real engine (a worker in this process, on both backends) drives an order whose charge is an
HTTP effect on the participant service, a process of its own keeping its own ledger. The service
then drifts: it answers in a shape the protocol does not know, starts refusing what it used to
take, answers 2xx with the receipt of another request, or crashes after applying and comes back
having lost its key table. Each time the effect fails visibly, goes UNKNOWN and is settled by
the participant's evidence, or goes to a person, with what was seen kept in the ledger; and the
participant's own ledger shows no charge applied twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.model.attempts import attempt_errors
from processes import Service, ServiceProcess
from remote_cast import declare

pytestmark = pytest.mark.slow

SHOP = "shop:lookup"  # looks up, does not deduplicate
LEGACY = "legacy:none"  # neither
BANK = "bank:dedupe+lookup"  # both, with the participant kit
RETRY = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=20), jitter=False)
# Long enough to outlast a restart of the service (asks over about 20 s).
LOOKUP_RETRY = lf.RetryPolicy(
    attempts_max=20, backoff_initial=timedelta(milliseconds=100), backoff_max=timedelta(seconds=1)
)
PARKED_OR_ENDED = {
    lf.InstanceStatus.SUCCEEDED,
    lf.InstanceStatus.FAILED,
    lf.InstanceStatus.MANUAL_INTERVENTION,
}


@pytest.fixture
def participants(tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path / "participants", [SHOP, LEGACY, BANK])
    process.start()
    try:
        yield process
    finally:
        process.stop()


def registry_for(url: str) -> lf.Registry:
    registry = lf.Registry()
    charge = {"charge": "compensatable"}
    # Those with a lookup ask it long enough to outlast a restart of the service.
    lookups = {"lookup_retry": LOOKUP_RETRY}
    at = {
        spec.partition(":")[0]: declare(
            registry, spec, operations=charge, retry=RETRY, url=url, **options
        )
        for spec, options in ((SHOP, lookups), (LEGACY, {}), (BANK, lookups))
    }

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, where: str) -> Any:
        return await ctx.effect(at[where].effects["charge"], {"amount": 7})

    return registry


def run_order(
    journal_url: str,
    service: Service,
    where: str,
    *,
    meanwhile: Any = None,
) -> tuple[lf.InstanceRecord, lf.EffectRecord]:
    """One order charged at ``where``; ``meanwhile`` (async, given the instance id) runs while
    the worker drives it. Returns the instance once it ended or parked, and its effect."""

    async def go() -> tuple[lf.InstanceRecord, lf.EffectRecord]:
        async with lf.Engine(journal_url, registry_for(service.url)) as engine:
            worker = engine.worker(lease_seconds=5, poll_seconds=0.02)
            running = asyncio.create_task(worker.run())
            try:
                started = await engine.start("order", key=f"order-{where}", input=where)
                if meanwhile is not None:
                    await meanwhile(engine, started.instance_id)

                async def settled() -> lf.InstanceRecord | None:
                    record = await engine.get(started.instance_id)
                    return record if record.status in PARKED_OR_ENDED else None

                record = await until(settled, what="the order to end or park", timeout=60)
                (effect,) = (await engine.detail(started.instance_id)).effects
                return record, effect
            finally:
                worker.stop()
                await running

    return asyncio.run(go())


def errors_seen(effect: lf.EffectRecord) -> str:
    return " | ".join(str(entry) for entry in attempt_errors(effect.attempt_errors))


def test_a_changed_answer_shape_is_settled_by_the_lookup(
    journal_url: str, participants: ServiceProcess
) -> None:
    """Goal: a participant that applies and answers in a new shape (no status, no receipt) is
    not believed: the effect goes UNKNOWN, the lookup's evidence confirms it, the charge is
    applied once and the shape that was refused stays in the effect's errors.

    Method: a ``reshape`` rule on the shop's first charge.
    """
    service = participants.service
    assert service is not None
    service.rules({"participant": "shop", "action": "reshape"})
    record, effect = run_order(journal_url, service, "shop")
    assert record.status is lf.InstanceStatus.SUCCEEDED
    assert effect.state is lf.EffectState.CONFIRMED
    assert effect.evidence_value["key"] == effect.idempotency_key
    assert service.applied_count("shop", effect.idempotency_key) == 1
    assert "without an applied status and a receipt" in errors_seen(effect)


def test_a_changed_answer_shape_without_a_lookup_goes_to_a_person(
    journal_url: str, participants: ServiceProcess
) -> None:
    """Goal: the same drift at a participant with neither lookup nor dedupe parks the order for
    a person, the reason naming the unreadable answer; nothing is sent again.

    Method: a ``reshape`` rule on legacy's first charge.
    """
    service = participants.service
    assert service is not None
    service.rules({"participant": "legacy", "action": "reshape"})
    record, effect = run_order(journal_url, service, "legacy")
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert effect.state is lf.EffectState.UNKNOWN
    assert "without an applied status and a receipt" in (record.reason or "")
    assert service.received_count("legacy", effect.idempotency_key) == 1
    assert service.applied_count("legacy", effect.idempotency_key) == 1


def test_a_participant_that_starts_refusing_fails_the_effect_visibly(
    journal_url: str, participants: ServiceProcess
) -> None:
    """Goal: a participant that now answers 400 to the request it used to take is never read
    as applied nor as a proven rejection: each answer is UNKNOWN, the lookup proves nothing was
    applied (and fences it), the retries are spent and the effect FAILED, every 400 kept.

    Method: a ``refuse`` rule on every shop charge.
    """
    service = participants.service
    assert service is not None
    service.rules({"participant": "shop", "action": "refuse", "times": 100})
    record, effect = run_order(journal_url, service, "shop")
    assert record.status is lf.InstanceStatus.FAILED
    assert effect.state is lf.EffectState.FAILED
    assert "lookup: not applied, no attempt left" in (effect.reason or "")
    assert errors_seen(effect).count("HTTP 400") == RETRY.attempts_max
    assert service.received_count("shop", effect.idempotency_key) == RETRY.attempts_max
    assert service.applied_count("shop", effect.idempotency_key) == 0


def test_a_receipt_for_another_request_is_not_evidence(
    journal_url: str, participants: ServiceProcess
) -> None:
    """Goal: a 200 "applied" whose receipt names another key and effect id (a mixed-up
    answer; this request was not applied) is not taken as this effect's evidence: UNKNOWN, the
    lookup answers not applied, the re-dispatch applies once, and the evidence names this key.

    Method: a ``foreign`` rule on the shop's first charge.
    """
    service = participants.service
    assert service is not None
    service.rules({"participant": "shop", "action": "foreign"})
    record, effect = run_order(journal_url, service, "shop")
    assert record.status is lf.InstanceStatus.SUCCEEDED
    assert effect.state is lf.EffectState.CONFIRMED
    assert effect.attempt == 2
    assert effect.evidence_value["key"] == effect.idempotency_key
    assert "answers another request: it names key 'another-request'" in errors_seen(effect)
    assert service.received_count("shop", effect.idempotency_key) == 2
    assert service.applied_count("shop", effect.idempotency_key) == 1


def test_a_participant_that_lost_its_keys_is_not_charged_twice(
    journal_url: str, participants: ServiceProcess
) -> None:
    """Goal: the shop applies the charge and crashes before answering, and comes back with its
    key table lost. Its lookup can no longer vouch for the key, so the engine does not send it
    again: the order goes to a person with the doubt, and the charge was applied once.

    Method: a ``crash`` rule (apply, commit, exit); while the engine's lookups are refused, the
    service is restarted on the same port with ``--lose-keys``.
    """
    record, effect = crash_and_restart(journal_url, participants, "shop", "--lose-keys")
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert effect.state is lf.EffectState.UNKNOWN
    assert "lookup cannot tell" in (record.reason or "")
    assert_applied_once(participants, "shop", effect)


def crash_and_restart(
    journal_url: str, participants: ServiceProcess, where: str, option: str
) -> tuple[lf.InstanceRecord, lf.EffectRecord]:
    """One order charged at ``where``, which applies the charge and crashes before answering;
    while the engine's lookups are refused, the service is restarted on the same port with
    ``option``."""
    service = participants.service
    assert service is not None
    service.rules({"participant": where, "action": "crash"})

    async def restart(engine: lf.Engine, instance_id: str) -> None:
        process = participants.process
        assert process is not None
        await until(lambda: process.poll() is not None, what=f"{where} to crash")
        participants.stop()
        participants.options = (option,)
        participants.start()

    return run_order(journal_url, service, where, meanwhile=restart)


def assert_applied_once(participants: ServiceProcess, where: str, effect: lf.EffectRecord) -> None:
    """The charge was sent once and applied once, as the restarted service's ledger says."""
    restarted = participants.service
    assert restarted is not None
    assert restarted.received_count(where, effect.idempotency_key) == 1
    assert restarted.applied_count(where, effect.idempotency_key) == 1


def test_a_kit_participant_that_lost_its_key_store_is_not_charged_twice(
    journal_url: str, participants: ServiceProcess
) -> None:
    """Goal: the bank deduplicates with the participant kit and has a lookup; it applies the
    charge, crashes before answering, and comes back with its kit's key store lost. The kit's
    own watermark (its record begins at the restart, after the key was first sent) makes its
    lookup answer "cannot tell" instead of "not applied", and that word beats the declared
    dedupe: the engine does not send the key again, the order goes to a person with the
    kit's reason, and the charge was applied once at the bank's own ledger.

    Method: a ``crash`` rule (apply, commit, exit); while the engine's lookups are refused, the
    service is restarted on the same port with ``--fresh-kit`` (the kit's table dropped and
    made again; the record of applications kept, for the count).
    """
    record, effect = crash_and_restart(journal_url, participants, "bank", "--fresh-kit")
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION, record.reason
    assert effect.state is lf.EffectState.UNKNOWN
    reason = record.reason or ""
    assert "lookup cannot tell: no record of the key, first sent at" in reason
    assert "it may have been applied and forgotten" in reason
    assert_applied_once(participants, "bank", effect)
