"""Effects over NATS JetStream, in one process against the real server and both journals: the
PubAck is only ACCEPTED, the reply completes the effect (deduplicated), a same-key re-publish is
dropped by the stream itself, and the relay refuses a stream whose duplicate window is shorter
than the retry horizon."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from conditions import until
from ledgerflow.demo.broker_payments import Misbehaviour, serve_nats
from ledgerflow.errors import ConfigurationError
from ledgerflow.model.definition import EffectCall
from ledgerflow.participant import NatsParticipant, declare_streams, nats_participant


def sync(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def suffix(nats_url: str) -> Iterator[str]:
    """This test's streams' names; deleted after it."""
    name = uuid.uuid4().hex[:10]
    yield name
    asyncio.run(_delete(nats_url, name))


async def _delete(url: str, suffix: str) -> None:
    import nats
    import nats.js.errors

    connection = await nats.connect(url)
    try:
        for stream in (f"PAY_{suffix}", f"PAY_{suffix}_REPLIES"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await connection.jetstream().delete_stream(stream)
    finally:
        await connection.close()


def build(
    url: str, suffix: str, *, deduplicates: bool = True, reply_within_seconds: float = 1.5
) -> tuple[lf.Registry, NatsParticipant]:
    registry = lf.Registry()
    payments = nats_participant(
        "payments",
        url,
        operations={"charge": "compensatable"},
        deduplicates=deduplicates,
        reply_within_seconds=reply_within_seconds,
        stream=f"PAY_{suffix}",
        subject=f"pay.{suffix}",
        reply_subject=f"ledgerflow.replies.{suffix}",
        confirm_seconds=2.0,
        retry=lf.RetryPolicy(
            attempts_max=4,
            backoff_initial=timedelta(milliseconds=50),
            backoff_max=timedelta(milliseconds=200),
        ),
    )
    registry.add_participant(payments)
    charge = payments.effects["charge"]

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, order: dict) -> dict:
        receipt = await ctx.effect(charge, {"amount": order["amount"], "order": order["name"]})
        return {"receipt": receipt}

    return registry, payments


@asynccontextmanager
async def running(
    journal_url: str,
    participant: NatsParticipant,
    registry: lf.Registry,
    *,
    consumer: Callable[[], Awaitable[None]] | None,
) -> AsyncIterator[tuple[lf.Engine, lf.NatsRelay]]:
    async with lf.Engine(journal_url, registry) as engine:
        relay = lf.NatsRelay(engine, participant.route)
        worker = engine.worker(poll_seconds=0.05)
        tasks = [asyncio.create_task(worker.run()), asyncio.create_task(relay.run())]
        if consumer is not None:
            tasks.append(asyncio.create_task(consumer()))
        try:
            yield engine, relay
        finally:
            worker.stop()
            relay.stop()
            if consumer is not None:
                tasks[-1].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await participant.aclose()


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


def applications(ledger: Path) -> dict[str, int]:
    with sqlite3.connect(ledger) as db:
        return dict(db.execute("SELECT key, count(*) FROM applications GROUP BY key").fetchall())


@sync
async def test_replies_three_times_over_complete_once_and_a_lost_reply_goes_to_a_person(
    journal_url: str, nats_url: str, suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(nats_url, suffix, reply_within_seconds=1.0)
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
    journal_url: str, nats_url: str, suffix: str, tmp_path: Path
) -> None:
    registry, payments = build(nats_url, suffix, deduplicates=False, reply_within_seconds=1.0)
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
async def test_a_same_key_republish_is_dropped_by_the_stream(nats_url: str, suffix: str) -> None:
    import nats

    _, payments = build(nats_url, suffix)
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
async def test_no_stream_for_the_subject_is_proven_not_stored(nats_url: str, suffix: str) -> None:
    _, payments = build(nats_url, suffix)
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
    nats_url: str, suffix: str, tmp_path: Path
) -> None:
    _, payments = build(nats_url, suffix)
    horizon = payments.route.retry_horizon_seconds
    await declare_streams(payments.route, duplicate_window_seconds=horizon / 2)
    async with lf.Engine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        with pytest.raises(ConfigurationError, match="shorter than the retry horizon"):
            await lf.NatsRelay(engine, payments.route).check()
        await _delete(nats_url, suffix)
        await declare_streams(payments.route)
        proven = await lf.NatsRelay(engine, payments.route).check()
    assert any(">= the retry horizon" in fact for fact in proven)
