"""Effects over RabbitMQ, in one process against the real broker and both journals: a confirm
is only ACCEPTED, the reply completes the effect on the callback's path (deduplicated, a
superseded, foreign or late reply kept refused), an unroutable publish is proven not sent and
retried, a dead-lettered request goes to a person, and the relay refuses a broker that lies."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from broker_running import applications, running, sync
from broker_workflows import build

import ledgerflow as lf
from conditions import until
from conftest import route_for
from ledgerflow.demo.broker_payments import Misbehaviour, serve
from ledgerflow.errors import ConfigurationError, RegistrationError
from ledgerflow.participant import declare_topology, rabbitmq_participant

OPERATIONS = ("charge",)


def consumer_of(url: str, ledger: Path, suffix: str, **misbehaving: Any) -> Callable[[], Any]:
    route = route_for(url, suffix)
    deduplicates = misbehaving.pop("deduplicates", True)
    return lambda: serve(
        url,
        ledger,
        request_queue=route.request_queue,
        misbehaviour=Misbehaviour(**misbehaving),
        deduplicates=deduplicates,
    )


async def effect_of(engine: lf.Engine, instance_id: str) -> lf.EffectRecord:
    (effect,) = (await engine.detail(instance_id)).effects
    return effect


async def publish_reply(url: str, queue: str, reply: dict[str, Any]) -> None:
    import aio_pika

    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.default_exchange.publish(
            aio_pika.Message(json.dumps(reply).encode()), routing_key=queue
        )


def orders(count: int) -> list[dict[str, Any]]:
    return [{"name": f"order-{n}", "amount": 100 + n} for n in range(count)]


@sync
async def test_a_reply_duplicated_three_times_completes_once_and_a_lost_one_is_resent(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(suffix=route_suffix, reply_within_seconds=1.5)
    await declare_topology(payments.route, operations=OPERATIONS)
    ledger = tmp_path / "payments.db"
    consumer = consumer_of(
        rabbitmq_url, ledger, route_suffix, replies=3, lose_replies_for={"order-3"}
    )
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        started = [await engine.start("order", key=o["name"], input=o) for o in orders(6)]
        results = [await engine.result(s.instance_id, timeout=30) for s in started]
        effects = [await effect_of(engine, s.instance_id) for s in started]
    assert [r["receipt"]["amount"] for r in results] == [100 + n for n in range(6)]
    assert all(e.state is lf.EffectState.CONFIRMED for e in effects)
    # The lost reply's effect went UNKNOWN at its deadline and was published again under its
    # key; the participant answered the repeat with its first receipt.
    assert effects[3].attempt == 2
    assert all(e.attempt == 1 for e in effects[:3] + effects[4:])
    assert applications(ledger) == {e.idempotency_key: 1 for e in effects}
    assert relay.counts["completed"] == 6
    assert relay.counts["duplicate"] == 2 * 6


@sync
async def test_a_participant_that_never_replies_leaves_the_effect_accepted_then_unknown(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(suffix=route_suffix, deduplicates=False, reply_within_seconds=1.0)
    await declare_topology(payments.route, operations=OPERATIONS)
    ledger = tmp_path / "payments.db"
    consumer = consumer_of(rabbitmq_url, ledger, route_suffix, silent=True)
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, _):
        started = await engine.start("order", key="o-1", input=orders(1)[0])
        accepted = await until(
            lambda: _in_state(engine, started.instance_id, lf.EffectState.ACCEPTED),
            what="the confirm recorded as ACCEPTED",
        )
        parked = await until(
            lambda: _parked(engine, started.instance_id), what="the instance parked for a person"
        )
        detail = await engine.detail(started.instance_id)
    # The confirm is evidence the broker took the message, and never a completion.
    assert json.loads(accepted.evidence or "{}")["confirm"] == "Ack"
    assert detail.effects[0].state is lf.EffectState.UNKNOWN
    assert "no completion callback before the deadline" in (detail.effects[0].reason or "")
    assert parked.reason_code == "effect_outcome_unknown"
    assert not any(e.to_state == "CONFIRMED" for e in detail.timeline)


@sync
async def test_an_unroutable_publish_is_proven_not_sent_and_succeeds_once_bound(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    import aio_pika

    registry, payments = build(suffix=route_suffix)
    # The topology without the binding: the exchange routes "charge" nowhere.
    await declare_topology(payments.route, operations=())
    ledger = tmp_path / "payments.db"
    consumer = consumer_of(rabbitmq_url, ledger, route_suffix)
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, _):
        started = await engine.start("order", key="o-1", input=orders(1)[0])
        refused = await until(
            lambda: _attempt_at_least(engine, started.instance_id, 2),
            what="an attempt refused as unroutable",
        )
        connection = await aio_pika.connect(rabbitmq_url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.get_queue(payments.route.request_queue)
            await queue.bind(payments.route.exchange, "charge")
        result = await engine.result(started.instance_id, timeout=30)
        effect = await effect_of(engine, started.instance_id)
    assert "unroutable" in (refused.attempt_errors or "")
    assert effect.state is lf.EffectState.CONFIRMED
    assert result["receipt"]["amount"] == 100
    assert applications(ledger) == {effect.idempotency_key: 1}


@sync
async def test_superseded_foreign_and_conflicting_replies_are_kept_refused(
    journal_url: str, rabbitmq_url: str, route_suffix: str
) -> None:
    registry, payments = build(suffix=route_suffix, reply_within_seconds=30)
    await declare_topology(payments.route, operations=OPERATIONS)
    # No consumer: the test answers as the participant, well and badly.
    async with running(journal_url, payments, registry, consumer=None) as (engine, relay):
        started = await engine.start("order", key="o-1", input=orders(1)[0])
        effect = await until(
            lambda: _in_state(engine, started.instance_id, lf.EffectState.ACCEPTED),
            what="the effect ACCEPTED",
        )
        base = {"key": effect.idempotency_key, "effect_id": effect.effect_id, "applied": True}
        receipt = {"amount": 100, "charge_id": "ch-1"}
        queue = payments.route.reply_queue
        for reply in (
            {**base, "attempt": 7, "evidence": {"superseded": True}},
            {**base, "attempt": 1, "effect_id": "ef_someone_else", "evidence": {}},
            {**base, "key": "no-such-key", "attempt": 1},
            {"not": "the protocol"},
        ):
            await publish_reply(rabbitmq_url, queue, reply)
        await until(lambda: relay.counts["refused"] == 2, what="two refused replies")
        await until(lambda: relay.counts["unmatched"] == 2, what="two unmatched replies")
        assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.WAITING
        await publish_reply(rabbitmq_url, queue, {**base, "attempt": 1, "evidence": receipt})
        result = await engine.result(started.instance_id, timeout=30)
        # The same reply again is a duplicate; another answer for the same attempt is unmatched.
        await publish_reply(rabbitmq_url, queue, {**base, "attempt": 1, "evidence": receipt})
        await publish_reply(rabbitmq_url, queue, {**base, "attempt": 1, "evidence": {"x": 2}})
        await until(lambda: relay.counts["unmatched"] == 3, what="a conflicting reply unmatched")
        detail = await engine.detail(started.instance_id)
    refusals = {d.refusal: d.reason for d in detail.inbox if d.refusal}
    assert set(refusals) == {"superseded", "foreign"}
    assert "attempt 7" in refusals["superseded"]
    assert "ef_someone_else" in refusals["foreign"]
    assert relay.counts["duplicate"] == 1
    assert relay.counts["completed"] == 1
    assert result == {"receipt": receipt}
    assert json.loads(detail.effects[0].evidence or "null") == receipt


@sync
async def test_a_reply_for_an_ended_instance_is_kept_refused(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(suffix=route_suffix)
    await declare_topology(payments.route, operations=OPERATIONS)
    consumer = consumer_of(rabbitmq_url, tmp_path / "payments.db", route_suffix)
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        started = await engine.start("order", key="o-1", input=orders(1)[0])
        await engine.result(started.instance_id, timeout=30)
        effect = await effect_of(engine, started.instance_id)
        # A reply for another attempt arriving after the instance ended (a re-send's answer).
        reply = {
            "key": effect.idempotency_key,
            "effect_id": effect.effect_id,
            "attempt": 2,
            "applied": True,
            "evidence": {"charge_id": "ch-1"},
        }
        await publish_reply(rabbitmq_url, payments.route.reply_queue, reply)
        await until(lambda: relay.counts["refused"] == 1, what="the reply refused")
        detail = await engine.detail(started.instance_id)
    (kept,) = [d for d in detail.inbox if d.event_id.endswith(":2")]
    assert kept.refusal == "ended"
    assert kept.state.value == "REJECTED"
    assert detail.effects[0].state is lf.EffectState.CONFIRMED


@sync
async def test_orders_complete_once_when_the_broker_drops_the_connections_mid_run(
    journal_url: str, rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("closing a connection from the broker's side needs rabbitmqctl")
    registry, payments = build(suffix=route_suffix, reply_within_seconds=3)
    await declare_topology(payments.route, operations=OPERATIONS)
    ledger = tmp_path / "payments.db"
    consumer = consumer_of(rabbitmq_url, ledger, route_suffix)
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        first = [await engine.start("order", key=o["name"], input=o) for o in orders(10)]
        await until(lambda: relay.counts["completed"] >= 3, what="some replies carried")
        closed = await asyncio.to_thread(close_connections, route_suffix)
        second = [await engine.start("order", key=f"late-{o['name']}", input=o) for o in orders(10)]
        started = first + second
        results = [await engine.result(s.instance_id, timeout=30) for s in started]
        effects = [await effect_of(engine, s.instance_id) for s in started]
    # The relay's connection and the publisher's were both closed by the broker.
    assert closed == 2
    assert all(r["receipt"]["amount"] >= 100 for r in results)
    assert all(e.state is lf.EffectState.CONFIRMED for e in effects)
    assert applications(ledger) == {e.idempotency_key: 1 for e in effects}


def close_connections(suffix: str) -> int:
    """Close, from the broker's side, the connections Ledgerflow opened for this test's route."""
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    pids = [
        line.split("\t", 1)[0]
        for line in listed.splitlines()
        if "ledgerflow" in line and suffix in line
    ]
    for pid in pids:
        subprocess.run(
            ["rabbitmqctl", "-q", "close_connection", pid, "dropped by the test"],
            check=True,
            timeout=60,
        )
    return len(pids)


@pytest.mark.parametrize(("requeue", "why"), [(True, "delivery_limit"), (False, "rejected")])
@sync
async def test_a_dead_lettered_request_parks_the_instance_with_the_brokers_evidence(
    journal_url: str, rabbitmq_url: str, route_suffix: str, requeue: bool, why: str
) -> None:
    import aio_pika

    registry, payments = build(suffix=route_suffix, reply_within_seconds=30, delivery_limit=2)
    await declare_topology(payments.route, operations=OPERATIONS)

    async def poison_refuser() -> None:
        # A consumer that cannot process the request: it gives it back each time (until the
        # quorum queue's delivery limit is spent), or refuses it outright.
        connection = await aio_pika.connect(rabbitmq_url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.get_queue(payments.route.request_queue)
            async with queue.iterator() as messages:
                async for message in messages:
                    await message.reject(requeue=requeue)

    async with running(journal_url, payments, registry, consumer=poison_refuser) as (engine, _):
        started = await engine.start("order", key="o-1", input=orders(1)[0])
        parked = await until(lambda: _parked(engine, started.instance_id), what="parked")
        effect = await effect_of(engine, started.instance_id)
    assert effect.state is lf.EffectState.UNKNOWN
    assert effect.doubt == 1
    assert "dead-lettered" in (parked.reason or "")
    assert why in (parked.reason or "")
    assert payments.route.request_queue in (effect.reason or "")
    assert ('"delivery_limit":2' in (effect.reason or "")) is requeue


@pytest.mark.parametrize(
    ("arguments", "lie"),
    [
        ({"x-queue-type": "classic"}, "x-queue-type"),
        ({"x-queue-type": "quorum"}, "x-dead-letter-exchange"),
    ],
)
@sync
async def test_the_relay_refuses_a_request_queue_that_is_not_what_the_route_claims(
    rabbitmq_url: str, route_suffix: str, tmp_path: Path, arguments: dict[str, str], lie: str
) -> None:
    import aio_pika

    _, payments = build(suffix=route_suffix)
    route = payments.route
    connection = await aio_pika.connect(rabbitmq_url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(route.request_queue, durable=True, arguments=arguments)
    await declare_topology_except_requests(route)
    async with lf.Engine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        with pytest.raises(ConfigurationError, match=lie) as refused:
            await lf.RabbitMQRelay(engine, route).check()
    assert "refuses to run" in str(refused.value)


@sync
async def test_the_relay_proves_a_topology_that_keeps_its_claims(
    rabbitmq_url: str, route_suffix: str, tmp_path: Path
) -> None:
    _, payments = build(suffix=route_suffix)
    await declare_topology(payments.route, operations=OPERATIONS)
    async with lf.Engine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        proven = await lf.RabbitMQRelay(engine, payments.route).check()
    assert len(proven) == 6
    assert all("quorum" in p for p in proven[2:])


async def declare_topology_except_requests(route: lf.participant.RabbitMQRoute) -> None:
    import aio_pika

    connection = await aio_pika.connect(route.url)
    async with connection:
        channel = await connection.channel()
        for exchange in (route.exchange, route.dead_letter_exchange):
            await channel.declare_exchange(exchange, aio_pika.ExchangeType.DIRECT, durable=True)
        for queue in route.queues()[1:]:
            await channel.declare_queue(queue, durable=True, arguments=route.arguments(queue))


async def _in_state(
    engine: lf.Engine, instance_id: str, state: lf.EffectState
) -> lf.EffectRecord | None:
    effects = (await engine.detail(instance_id)).effects
    return effects[0] if effects and effects[0].state is state else None


async def _attempt_at_least(
    engine: lf.Engine, instance_id: str, attempt: int
) -> lf.EffectRecord | None:
    effects = (await engine.detail(instance_id)).effects
    return effects[0] if effects and effects[0].attempt >= attempt else None


async def _parked(engine: lf.Engine, instance_id: str) -> lf.InstanceRecord | None:
    record = await engine.get(instance_id)
    return record if record.status is lf.InstanceStatus.MANUAL_INTERVENTION else None


async def _ended(engine: lf.Engine, instance_id: str) -> bool:
    record = await engine.get(instance_id)
    return record.status.value in ("CANCELLED", "COMPENSATED", "FAILED", "COMPLETED")


@pytest.mark.parametrize(
    ("url", "operations", "refused"),
    [
        ("http://127.0.0.1:5672/", {"charge": "compensatable"}, "amqp://guest"),
        ("amqp://guest:guest@127.0.0.1:5672/", {}, "operations= takes a dict"),
        ("amqp://guest:guest@127.0.0.1:5672/", {"charge": "sometimes"}, "unknown classification"),
    ],
)
def test_a_rabbitmq_participant_declared_wrongly_is_refused_with_what_to_pass(
    url: str, operations: dict[str, str], refused: str
) -> None:
    with pytest.raises(RegistrationError, match=refused):
        rabbitmq_participant(
            "payments", url, operations=operations, deduplicates=True, reply_within_seconds=5
        )
