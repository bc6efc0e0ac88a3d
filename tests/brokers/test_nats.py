"""Effects over NATS JetStream, in one process against the real server and both journals: the
PubAck is only ACCEPTED, the reply completes the effect (deduplicated), a same-key re-publish is
dropped by the stream itself, and the relay refuses a stream whose duplicate window is shorter
than the retry horizon."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from broker_running import applications, running, sync
from broker_workflows import NATS_URL, build_nats
from cuttable import Cuttable
from kit_consumers import KitService, pull_forever, serve_kit_nats

import ledgerflow as lf
from conditions import until
from conftest import delete_streams
from ledgerflow.demo.broker_payments import Misbehaviour, serve_nats
from ledgerflow.errors import ConfigurationError
from ledgerflow.model.definition import EffectCall
from ledgerflow.participant import NatsParticipant, declare_streams


def build(
    url: str, suffix: str, *, deduplicates: bool = True, reply_within_seconds: float = 1.5
) -> tuple[lf.Registry, NatsParticipant]:
    assert url == NATS_URL, "the tests' workflows read the same LEDGERFLOW_TEST_NATS_URL"
    return build_nats(
        suffix=suffix,
        deduplicates=deduplicates,
        reply_within_seconds=reply_within_seconds,
        attempts_max=4,
    )


def consumer_of(
    participant: NatsParticipant, ledger: Path, **misbehaving: Any
) -> Callable[[], Awaitable[None]]:
    route = participant.route
    return lambda: serve_nats(
        route.url,
        ledger,
        stream=route.stream,
        subject=route.subject,
        misbehaviour=Misbehaviour(**misbehaving),
    )


@sync
async def test_replies_three_times_over_complete_once_and_a_lost_reply_goes_to_a_person(
    journal_url: str, nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(nats_url, nats_suffix, reply_within_seconds=1.0)
    await declare_streams(payments.route)
    ledger = tmp_path / "payments.db"
    consumer = consumer_of(payments, ledger, replies=3, lose_replies_for={"order-2"})
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
        started = [
            await engine.start("order", key=f"order-{n}", input={"name": f"order-{n}", "amount": n})
            for n in range(5)
        ]
        done = [started[n] for n in (0, 1, 3, 4)]
        results = [await engine.result(s.instance_id, timeout=30) for s in done]

        async def parked() -> bool:
            record = await engine.get(started[2].instance_id)
            return record.status is lf.InstanceStatus.MANUAL_INTERVENTION

        await until(parked, what="the order whose reply was lost parked for a person")
        effects = [(await engine.detail(s.instance_id)).effects[0] for s in started]
    assert [r["receipt"]["amount"] for r in results] == [0, 1, 3, 4]
    assert [e.state for e in effects].count(lf.EffectState.CONFIRMED) == 4
    # Each re-publish of order-2 under its key was dropped by the stream (the PubAck says
    # duplicate), so the participant applied it once and was never asked again: only a lookup
    # or a person can settle it.
    lost = effects[2]
    assert lost.state is lf.EffectState.UNKNOWN
    assert lost.attempt == 4
    assert applications(ledger) == {e.idempotency_key: 1 for e in effects}
    assert relay.counts["completed"] == 4
    assert relay.counts["duplicate"] == 2 * 4


@sync
async def test_the_puback_is_accepted_and_a_silent_participant_leaves_the_effect_unknown(
    journal_url: str, nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(nats_url, nats_suffix, deduplicates=False, reply_within_seconds=1.0)
    await declare_streams(payments.route)
    consumer = consumer_of(payments, tmp_path / "payments.db", silent=True)
    async with running(journal_url, payments, registry, consumer=consumer) as (engine, _):
        started = await engine.start("order", key="o-1", input={"name": "o-1", "amount": 5})

        async def accepted() -> lf.EffectRecord | None:
            effects = (await engine.detail(started.instance_id)).effects
            return effects[0] if effects and effects[0].state is lf.EffectState.ACCEPTED else None

        async def parked() -> bool:
            record = await engine.get(started.instance_id)
            return record.status is lf.InstanceStatus.MANUAL_INTERVENTION

        effect = await until(accepted, what="the PubAck recorded as ACCEPTED")
        await until(parked, what="the instance parked for a person")
        detail = await engine.detail(started.instance_id)
    evidence = json.loads(effect.evidence or "{}")
    assert evidence["broker"] == "nats"
    assert evidence["duplicate"] is False
    assert detail.effects[0].state is lf.EffectState.UNKNOWN
    assert not any(e.to_state == "CONFIRMED" for e in detail.timeline)


@sync
async def test_a_same_key_republish_is_dropped_by_the_stream(
    nats_url: str, nats_suffix: str
) -> None:
    import nats

    _, payments = build(nats_url, nats_suffix)
    await declare_streams(payments.route)
    call = EffectCall(
        participant="payments",
        operation="charge",
        idempotency_key="lf:default:payments/charge:wf_x/r1/s1/effect",
        effect_id="ef_x",
        instance_id="wf_x",
        attempt=1,
        payload={"amount": 1},
    )
    first = await payments.publish("charge", call)
    again = await payments.publish("charge", call)
    await payments.aclose()
    connection = await nats.connect(nats_url)
    info = await connection.jetstream().stream_info(payments.route.stream)
    await connection.close()
    assert first["duplicate"] is False
    assert again["duplicate"] is True
    assert again["seq"] == first["seq"]
    assert info.state.messages == 1


@sync
async def test_no_stream_for_the_subject_is_proven_not_stored(
    nats_url: str, nats_suffix: str
) -> None:
    _, payments = build(nats_url, nats_suffix)
    call = EffectCall(
        participant="payments",
        operation="charge",
        idempotency_key="k",
        effect_id="ef_x",
        instance_id="wf_x",
        attempt=1,
        payload={},
    )
    with pytest.raises(lf.participant.EffectRejectedError) as refused:
        await payments.publish("charge", call)
    await payments.aclose()
    assert refused.value.error_code == "no_stream"
    assert refused.value.retryable


@sync
async def test_the_relay_refuses_a_duplicate_window_shorter_than_the_retry_horizon(
    nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    _, payments = build(nats_url, nats_suffix)
    horizon = payments.route.retry_horizon_seconds
    await declare_streams(payments.route, duplicate_window_seconds=horizon / 2)
    async with lf.Engine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        with pytest.raises(ConfigurationError, match="shorter than the retry horizon"):
            await lf.NatsRelay(engine, payments.route).check()
        await delete_streams(nats_url, nats_suffix)
        await declare_streams(payments.route)
        proven = await lf.NatsRelay(engine, payments.route).check()
    assert any(">= the retry horizon" in fact for fact in proven)


@sync
async def test_orders_complete_once_when_the_connections_to_the_server_drop_mid_run(
    journal_url: str, nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    async with Cuttable(nats_url) as network:
        # The publisher, the relay and the participant's consumer all reach the server
        # through the forwarder, whose connections the test resets mid-run.
        registry, payments = build_nats(suffix=nats_suffix, url=network.url, reply_within_seconds=3)
        await declare_streams(payments.route)
        service = KitService(tmp_path / "kit.db")

        async def consumer() -> None:
            await serve_kit_nats(payments.route, service)

        async with running(journal_url, payments, registry, consumer=consumer) as (engine, relay):
            first = [await engine.start("order", key=f"o-{n}", input=order(n)) for n in range(10)]
            await until(lambda: relay.counts["completed"] >= 3, what="some replies carried")
            accepted = network.accepted
            dropped = network.cut()
            second = [await engine.start("order", key=f"p-{n}", input=order(n)) for n in range(10)]
            started = first + second
            results = [await engine.result(s.instance_id, timeout=30) for s in started]
            effects = [(await engine.detail(s.instance_id)).effects[0] for s in started]
    # The publisher's, the relay's and the consumer's connections were cut, and each was made
    # again through the forwarder.
    assert dropped == 3
    assert network.accepted >= accepted + 3
    assert all(r["receipt"]["amount"] >= 0 for r in results)
    assert all(e.state is lf.EffectState.CONFIRMED for e in effects)
    assert service.applications() == {e.idempotency_key: 1 for e in effects}


def order(n: int) -> dict[str, Any]:
    return {"name": f"order-{n}", "amount": n}


@pytest.mark.parametrize("gives_back", [True, False], ids=["nak", "never-acked"])
@sync
async def test_a_request_given_up_on_after_max_deliver_parks_the_instance_with_the_evidence(
    journal_url: str, nats_url: str, nats_suffix: str, gives_back: bool
) -> None:
    import nats
    from nats.js.api import ConsumerConfig

    registry, payments = build(nats_url, nats_suffix, reply_within_seconds=30)
    route = payments.route
    await declare_streams(route)

    async def poison_refuser() -> None:
        # A consumer that cannot process the request: it gives it back each time, or never
        # acks it (delivered again after its ack wait), until its max_deliver is spent.
        connection = await nats.connect(nats_url)
        try:
            requests = await connection.jetstream().pull_subscribe(
                f"{route.subject}.>",
                durable="payments-poison",
                stream=route.stream,
                config=ConsumerConfig(ack_wait=1.0, max_deliver=2),
            )

            async def refuse(message: Any) -> None:
                if gives_back:
                    await message.nak()

            await pull_forever(requests, refuse)
        finally:
            await connection.close()

    async with running(journal_url, payments, registry, consumer=poison_refuser) as (
        engine,
        relay,
    ):
        started = await engine.start("order", key="o-1", input=order(1))

        async def parked() -> lf.InstanceRecord | None:
            record = await engine.get(started.instance_id)
            return record if record.status is lf.InstanceStatus.MANUAL_INTERVENTION else None

        record = await until(parked, what="the instance parked for a person")
        (effect,) = (await engine.detail(started.instance_id)).effects
    assert effect.state is lf.EffectState.UNKNOWN
    assert effect.doubt == 1
    assert "dead-lettered" in (record.reason or "")
    # The server's own account: how often it delivered the request, from which stream and
    # consumer, and the owner generation that published it.
    reason = effect.reason or ""
    assert '"reason":"max_deliveries"' in reason
    assert '"deliveries":2' in reason
    assert f'"stream":"{route.stream}"' in reason
    assert '"consumer":"payments-poison"' in reason
    assert '"generation":' in reason
    assert relay.counts["dead_lettered"] == 1


@sync
async def test_the_relay_refuses_a_route_whose_dead_letters_no_stream_keeps(
    nats_url: str, nats_suffix: str, tmp_path: Path
) -> None:
    import nats

    _, payments = build(nats_url, nats_suffix)
    await declare_streams(payments.route)
    connection = await nats.connect(nats_url)
    await connection.jetstream().delete_stream(payments.route.dead_letter_stream)
    await connection.close()
    async with lf.Engine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        with pytest.raises(ConfigurationError, match="_DEAD' does not exist"):
            await lf.NatsRelay(engine, payments.route).check()
