"""A payment service built on the participant kit, behind a RabbitMQ or a NATS consumer: what
the broker tests run as the participant when they need the kit's own answers (its dedupe, its
echo of the request's correlation) and a hand on each delivery.

Each delivery goes through ``hold`` (the test's choreography: wait for a condition, close the
delivery's channel) before :func:`ledgerflow.participant.handle_message`, then its reply is
published and the delivery acknowledged; ``after`` hears of it once that is done. Deliveries
run concurrently, as a slow consumer's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ledgerflow.participant import Kit, KitRequest, NatsRoute, RabbitMQRoute, handle_message

Hold = Callable[["Delivery"], Awaitable[None]]


@dataclass(slots=True)
class Delivery:
    """One delivery of a request as the consumer saw it."""

    request: dict[str, Any]
    number: int  # the broker's delivery count: 1 first, 2 a redelivery...
    close_channel: Callable[[], Awaitable[Any]] | None = None
    acked: bool = False
    ack_error: str | None = None


@dataclass(slots=True)
class KitService:
    """The service: its kit and its charges in one SQLite file."""

    path: Path
    hold: Hold | None = None
    after: Callable[[Delivery], None] | None = None
    deliveries: list[Delivery] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)
    kit: Kit[sqlite3.Connection] = field(init=False)

    def __post_init__(self) -> None:
        self.kit = Kit.sqlite(str(self.path), namespace="payments", retention=timedelta(days=1))
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT NOT NULL, amount INTEGER)")

    def _charge(self, db: sqlite3.Connection, request: KitRequest) -> dict[str, Any]:
        cursor = db.execute(
            "INSERT INTO charges (key, amount) VALUES (?, ?)",
            (request.key, request.payload["amount"]),
        )
        return {"charge_id": f"ch-{cursor.lastrowid}", "amount": request.payload["amount"]}

    def applications(self) -> dict[str, int]:
        """How many times the service's own ledger applied each key."""
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            rows = db.execute("SELECT key, count(*) FROM charges GROUP BY key").fetchall()
        return dict(rows)

    async def answer(self, delivery: Delivery) -> bytes:
        self.deliveries.append(delivery)
        if self.hold is not None:
            await self.hold(delivery)
        reply = await handle_message(
            self.kit, delivery.request, operations={"charge": self._charge}
        )
        self.replies.append(reply)
        return json.dumps(reply).encode()

    def done(self, delivery: Delivery) -> None:
        if self.after is not None:
            self.after(delivery)


async def serve_kit_rabbitmq(route: RabbitMQRoute, service: KitService, *, channels: int) -> None:
    """Consume the request queue on ``channels`` channels until cancelled; replies are
    published with confirms on a channel of their own."""
    import aio_pika
    import aio_pika.abc
    from aio_pika.exceptions import AMQPError, ChannelInvalidStateError

    connection = await aio_pika.connect(route.url)
    async with connection:
        publisher = await connection.channel(publisher_confirms=True)

        handling: set[asyncio.Task[None]] = set()

        async def consume(
            channel: aio_pika.abc.AbstractChannel, message: aio_pika.abc.AbstractIncomingMessage
        ) -> None:
            # Handled in a task of this consumer's own: closing the channel cancels the
            # channel's tasks, and a slow consumer's work goes on when its channel is gone.
            task = asyncio.create_task(handle(channel, message))
            handling.add(task)
            task.add_done_callback(handling.discard)

        async def handle(
            channel: aio_pika.abc.AbstractChannel, message: aio_pika.abc.AbstractIncomingMessage
        ) -> None:
            # A quorum queue counts the earlier deliveries of a message it delivers again.
            count = (message.headers or {}).get("x-delivery-count")
            number = 1 + int(str(count)) if count is not None else 1 + int(message.redelivered)
            delivery = Delivery(json.loads(message.body), number, close_channel=channel.close)
            reply = await service.answer(delivery)
            await publisher.default_exchange.publish(
                aio_pika.Message(reply, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=message.reply_to or "",
            )
            try:
                await message.ack()
                delivery.acked = True
            except (AMQPError, ChannelInvalidStateError, RuntimeError) as error:
                # The delivery's channel is gone: the broker has requeued it already.
                delivery.ack_error = repr(error)
            service.done(delivery)

        for _ in range(channels):
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=4)
            queue = await channel.get_queue(route.request_queue, ensure=False)
            await queue.consume(functools.partial(consume, channel))
        try:
            await asyncio.Future()  # until cancelled
        finally:
            for task in handling:
                task.cancel()


async def serve_kit_nats(
    route: NatsRoute,
    service: KitService,
    *,
    ack_wait_seconds: float = 5.0,
    max_deliver: int = -1,
    url: str | None = None,
) -> None:
    """Consume the request stream with a durable pull consumer until cancelled, each message
    handled in a task of its own; replies published to ``Lf-Reply-To``, waited for their
    PubAck, then the message acknowledged."""
    import nats
    import nats.errors
    from nats.js.api import ConsumerConfig

    connection = await nats.connect(url or route.url)
    handling: set[asyncio.Task[None]] = set()
    try:
        jetstream = connection.jetstream()
        requests = await jetstream.pull_subscribe(
            f"{route.subject}.>",
            durable="payments-kit",
            stream=route.stream,
            config=ConsumerConfig(ack_wait=ack_wait_seconds, max_deliver=max_deliver),
        )

        async def handle(message: Any) -> None:
            delivery = Delivery(json.loads(message.data), message.metadata.num_delivered)
            reply = await service.answer(delivery)
            try:
                await jetstream.publish((message.headers or {})["Lf-Reply-To"], reply)
                await message.ack()
            except (TimeoutError, nats.errors.Error) as error:
                # Not acknowledged: the server delivers it again after the ack wait.
                delivery.ack_error = repr(error)
                return
            delivery.acked = True
            service.done(delivery)

        async def spawn(message: Any) -> None:
            task = asyncio.create_task(handle(message))
            handling.add(task)
            task.add_done_callback(handling.discard)

        await pull_forever(requests, spawn)
    finally:
        for task in handling:
            task.cancel()
        await connection.close()


async def pull_forever(subscription: Any, handle: Callable[[Any], Awaitable[None]]) -> None:
    """Fetch from a pull subscription until cancelled, each message to ``handle``."""
    import nats.errors

    while True:
        try:
            messages = await subscription.fetch(8, timeout=0.5)
        except (TimeoutError, nats.errors.TimeoutError):
            continue
        for message in messages:
            await handle(message)
