"""The participant kit behind each broker's consumer, against the real brokers and both
journals: its reply echoes the request's (effect id, attempt, generation) and the journal
records the generation with the confirm; and an ack that comes after the redelivery window,
while the redelivery is being processed, changes nothing: applied once, one completion, the
second reply a duplicate."""

from __future__ import annotations

from pathlib import Path

from broker_running import running, sync
from broker_workflows import build, build_nats
from kit_consumers import KitService, serve_kit_nats, serve_kit_rabbitmq

import ledgerflow as lf
from ledgerflow.participant import declare_streams, declare_topology

# Bound on each step of a choreography between two deliveries.
STEP_SECONDS = 30.0


async def published_by(engine: lf.Engine, instance_id: str) -> int:
    """The generation of the owner that recorded the effect ACCEPTED (the one that published)."""
    detail = await engine.detail(instance_id)
    (accepted,) = [e for e in detail.timeline if e.to_state == "ACCEPTED"]
    return int(accepted.generation)


async def assert_generations_recorded(
    engine: lf.Engine, service: KitService, started: list[lf.InstanceRecord]
) -> None:
    by_key = {d.request["key"]: d.request for d in service.deliveries}
    for instance in started:
        detail = await engine.detail(instance.instance_id)
        (effect,) = detail.effects
        sent = by_key[effect.idempotency_key]
        generation = await published_by(engine, instance.instance_id)
        # The request carried the publishing owner's generation, the reply echoed it, and the
        # journal kept it with the reply and with the confirm.
        assert sent["generation"] == generation
        (reply,) = [d for d in detail.inbox if d.event_id.startswith("reply:")]
        assert reply.payload_value["answered"] == {"attempt": 1, "generation": generation}
        (confirm,) = [e for e in detail.timeline if e.to_state == "CONFIRMED"]
        assert f"generation {generation}" in (confirm.detail or "")


async def orders_complete_with_their_generations(engine: lf.Engine, service: KitService) -> None:
    started = [
        await engine.start("order", key=f"o-{n}", input={"name": f"o-{n}", "amount": n})
        for n in range(3)
    ]
    results = [await engine.result(s.instance_id, timeout=30) for s in started]
    assert [r["receipt"]["amount"] for r in results] == [0, 1, 2]
    await assert_generations_recorded(engine, service, started)


@sync
async def test_a_kit_reply_over_rabbitmq_echoes_the_generation_the_journal_records(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(suffix=route_suffix)
    await declare_topology(payments.route, operations=("charge",))
    service = KitService(tmp_path / "kit.db")

    async def consumer() -> None:
        await serve_kit_rabbitmq(payments.route, service, channels=1)

    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        await orders_complete_with_their_generations(engine, service)
    assert all(r["status"] == "applied" and "generation" in r for r in service.replies)
    assert relay.counts["completed"] == 3


@sync
async def test_a_kit_reply_over_nats_echoes_the_generation_the_journal_records(
    journal_url: str, nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build_nats(suffix=nats_suffix)
    await declare_streams(payments.route)
    service = KitService(tmp_path / "kit.db")

    async def consumer() -> None:
        await serve_kit_nats(payments.route, service)

    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        await orders_complete_with_their_generations(engine, service)
    assert relay.counts["completed"] == 3
