"""The participant kit behind each broker's consumer, against the real brokers and both
journals: its reply echoes the request's (effect id, attempt, generation) and the journal
records the generation with the confirm; and an ack that comes after the redelivery window,
while the redelivery is being processed, changes nothing: applied once, one completion, the
second reply a duplicate."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from broker_running import running, sync
from broker_workflows import build, build_nats
from kit_consumers import Delivery, KitService, serve_kit_nats, serve_kit_rabbitmq

import ledgerflow as lf
from conditions import until
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


class LateAck:
    """The choreography of a slow consumer: the first delivery is held until the broker has
    delivered the request again; the redelivery is held, being processed, until the first
    delivery has replied and acknowledged (late, past the redelivery window)."""

    def __init__(self, *, close_first_channel: bool) -> None:
        self.close_first_channel = close_first_channel
        self.redelivered = asyncio.Event()
        self.first_done = asyncio.Event()

    async def hold(self, delivery: Delivery) -> None:
        if delivery.number == 1:
            if self.close_first_channel and delivery.close_channel is not None:
                # As the broker does when a consumer passes its timeout: the channel is
                # closed before the ack, and the broker requeues the delivery.
                await delivery.close_channel()
            await asyncio.wait_for(self.redelivered.wait(), STEP_SECONDS)
        else:
            self.redelivered.set()
            await asyncio.wait_for(self.first_done.wait(), STEP_SECONDS)

    def after(self, delivery: Delivery) -> None:
        if delivery.number == 1:
            self.first_done.set()


async def one_order_answered_twice(
    engine: lf.Engine, relay: lf.RabbitMQRelay | lf.NatsRelay, service: KitService
) -> lf.EffectRecord:
    """One order; both deliveries' replies carried; its effect."""
    started = await engine.start("order", key="o-1", input={"name": "o-1", "amount": 7})
    result = await engine.result(started.instance_id, timeout=30)
    await until(lambda: sum(relay.counts.values()) == 2, what="both replies carried")
    detail = await engine.detail(started.instance_id)
    (effect,) = detail.effects
    assert result["receipt"]["amount"] == 7
    assert effect.state is lf.EffectState.CONFIRMED
    assert effect.attempt == 1
    # The kit applied it once and answered the redelivery with the first receipt; the journal
    # holds one reply event and one completion, the second reply a duplicate of it.
    assert service.applications() == {effect.idempotency_key: 1}
    assert [d.number for d in service.deliveries] == [1, 2]
    first, second = service.replies
    assert (first["duplicate"], second["duplicate"]) == (False, True)
    assert first["receipt"] == second["receipt"] == json.loads(effect.evidence or "null")
    assert [d.event_id.split(":")[0] for d in detail.inbox] == ["reply"]
    assert (relay.counts["completed"], relay.counts["duplicate"]) == (1, 1)
    return effect


@sync
async def test_a_late_ack_over_nats_while_the_redelivery_is_processed_applies_once(
    journal_url: str, nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build_nats(suffix=nats_suffix)
    await declare_streams(payments.route)
    late = LateAck(close_first_channel=False)
    service = KitService(tmp_path / "kit.db", hold=late.hold, after=late.after)

    async def consumer() -> None:
        # An ack wait of 1 s: the held first delivery is delivered again after it.
        await serve_kit_nats(payments.route, service, ack_wait_seconds=1.0)

    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        await one_order_answered_twice(engine, relay, service)
    first, second = service.deliveries
    # The server took the first delivery's ack, past its ack wait, as the second one's.
    assert first.acked
    assert second.acked


@sync
async def test_a_late_reply_over_rabbitmq_while_the_redelivery_is_processed_applies_once(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(suffix=route_suffix)
    await declare_topology(payments.route, operations=("charge",))
    late = LateAck(close_first_channel=True)
    service = KitService(tmp_path / "kit.db", hold=late.hold, after=late.after)

    async def consumer() -> None:
        await serve_kit_rabbitmq(payments.route, service, channels=2)

    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        await one_order_answered_twice(engine, relay, service)
    first, second = service.deliveries
    # A delivery's ack belongs to its channel: the first one's cannot reach the broker once
    # the channel is closed (the broker requeued it then), and the redelivery's is the ack.
    assert not first.acked
    assert first.ack_error is not None
    assert second.acked
