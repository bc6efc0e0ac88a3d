"""A participant service over a broker, built on the kit: it consumes ``broker_cast``'s route,
applies each charge through :func:`ledgerflow.participant.handle_message` and publishes the
reply where the request asks, acknowledging only after. ``twice`` makes it dishonest: each
delivery is applied under a key of its own, so a repeat is applied again (its declaration still
claims dedupe). Run as ``python broker_consumer.py rabbitmq|nats [--twice]`` with the
environment of ``broker_cast``."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

from broker_cast import kit, pay_nats, pay_rabbit

from ledgerflow.participant import KitRequest, handle_message

SCHEMA = "CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, key TEXT, amount INTEGER)"


def charge(db: Any, request: KitRequest) -> dict[str, Any]:
    db.execute(SCHEMA)
    cursor = db.execute(
        "INSERT INTO charges (key, amount) VALUES (?, ?)",
        (request.key, (request.payload or {}).get("amount", 0)),
    )
    return {"charge_id": cursor.lastrowid}


async def answer(message: dict[str, Any], *, twice: bool) -> dict[str, Any]:
    own = kit()
    try:
        asked = {**message, "key": f"{message['key']}~{uuid.uuid4().hex}"} if twice else message
        reply = await handle_message(own, asked, operations={"charge": charge})
    finally:
        own.close()
    return {**reply, "key": message["key"]}


async def serve_rabbitmq(*, twice: bool) -> None:
    import aio_pika

    connection = await aio_pika.connect(pay_rabbit.route.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.get_queue(pay_rabbit.route.request_queue, ensure=False)
        async with queue.iterator() as messages:
            async for message in messages:
                reply = await answer(json.loads(message.body), twice=twice)
                await channel.default_exchange.publish(
                    aio_pika.Message(json.dumps(reply).encode()),
                    routing_key=message.reply_to or "",
                )
                await message.ack()


async def serve_nats(*, twice: bool) -> None:
    import nats
    import nats.errors

    route = pay_nats.route
    connection = await nats.connect(route.url)
    try:
        jetstream = connection.jetstream()
        requests = await jetstream.pull_subscribe(
            f"{route.subject}.>", durable="pay-service", stream=route.stream
        )
        while True:
            try:
                messages = await requests.fetch(8, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for message in messages:
                reply = await answer(json.loads(message.data), twice=twice)
                await jetstream.publish(
                    (message.headers or {})["Lf-Reply-To"], json.dumps(reply).encode()
                )
                await message.ack()
    finally:
        await connection.close()


if __name__ == "__main__":
    dishonest = "--twice" in sys.argv
    served = serve_nats if sys.argv[1] == "nats" else serve_rabbitmq
    asyncio.run(served(twice=dishonest))
