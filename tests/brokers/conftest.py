"""RabbitMQ and NATS for the broker tests: their URLs from ``LEDGERFLOW_TEST_RABBITMQ_URL`` and
``LEDGERFLOW_TEST_NATS_URL`` (CI sets both and fails if a broker is unreachable); without one
its tests are skipped with that reason. Each test gets its own exchanges and queues, or
streams (the brokers are shared), deleted after it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from ledgerflow.participant import RabbitMQRoute

ENVIRONMENT_VARIABLE = "LEDGERFLOW_TEST_RABBITMQ_URL"
NATS_VARIABLE = "LEDGERFLOW_TEST_NATS_URL"


@pytest.fixture
def nats_url() -> str:
    url = os.environ.get(NATS_VARIABLE)
    if not url:
        pytest.skip(f"NATS tests need {NATS_VARIABLE} (e.g. nats://127.0.0.1:4222)")
    return url


@pytest.fixture
def rabbitmq_url() -> str:
    url = os.environ.get(ENVIRONMENT_VARIABLE)
    if not url:
        pytest.skip(
            f"RabbitMQ tests need {ENVIRONMENT_VARIABLE} (e.g. amqp://guest:guest@127.0.0.1:5672/)"
        )
    return url


@pytest.fixture
def route_suffix(rabbitmq_url: str) -> Iterator[str]:
    """A fresh name for this test's topology; its queues and exchanges are deleted after it."""
    suffix = uuid.uuid4().hex[:10]
    yield suffix
    asyncio.run(_delete(rabbitmq_url, suffix))


def route_for(url: str, suffix: str) -> RabbitMQRoute:
    """The route the tests' payments service is declared with (broker_workflows.build)."""
    from broker_workflows import build

    route = build(suffix=suffix)[1].route
    assert route.url == url, "the tests' workflows read the same LEDGERFLOW_TEST_RABBITMQ_URL"
    return route


async def _delete(url: str, suffix: str) -> None:
    import aio_pika

    route = route_for(url, suffix)
    connection = await aio_pika.connect(url)
    async with connection:
        for queue in route.queues():
            channel = await connection.channel()
            await channel.queue_delete(queue)
        for exchange in (route.exchange, route.dead_letter_exchange):
            channel = await connection.channel()
            await channel.exchange_delete(exchange)


@pytest.fixture
def nats_suffix(nats_url: str) -> Iterator[str]:
    """A fresh name for this test's streams; deleted after it."""
    suffix = uuid.uuid4().hex[:10]
    yield suffix
    asyncio.run(delete_streams(nats_url, suffix))


async def delete_streams(url: str, suffix: str) -> None:
    import nats
    import nats.js.errors

    connection = await nats.connect(url)
    try:
        for stream in (f"PAY_{suffix}", f"PAY_{suffix}_REPLIES", f"PAY_{suffix}_DEAD"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await connection.jetstream().delete_stream(stream)
    finally:
        await connection.close()
