"""A payment service reached through RabbitMQ: the participant side of a broker effect, for
the demo and the tests (internal).

It consumes its request queue, applies each charge to its own SQLite ledger — once per
``message_id`` (the effect's idempotency key), in one transaction with the key — and publishes
its reply to the message's ``reply_to`` queue with the effect id and attempt the request
carried, waiting for the broker's confirm; only then does it acknowledge the request. A
delivery it sees again (a redelivery after a crash, the engine's same-key re-publish) is
answered with the first application's receipt.

:func:`answer` is where a participant's own logic sits: a participant kit's handler
(``handle_message(kit, message) -> reply``) takes its place one for one.

Run one with ``python -m ledgerflow.demo.broker_payments URL LEDGER [--request-queue QUEUE]``
(RabbitMQ) or ``... URL LEDGER --nats-stream STREAM --nats-subject SUBJECT`` (NATS JetStream);
``--lose-replies-for ORDER``, ``--replies N`` and ``--silent`` make it misbehave for the tests
(a lost reply, each reply sent N times, no reply at all).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS applications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    order_name TEXT,
    amount INTEGER NOT NULL,
    receipt TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    attempt INTEGER,
    redelivered INTEGER NOT NULL
);
"""


class PaymentsLedger:
    """The service's own ledger: every application, every delivery it saw."""

    def __init__(self, path: Path, *, deduplicates: bool = True) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.executescript(SCHEMA)
        self.deduplicates = deduplicates

    def apply(self, key: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Apply a charge once per key (the key and the charge in one transaction); a repeat
        returns the first receipt."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            first = self.db.execute(
                "SELECT receipt FROM applications WHERE key = ? ORDER BY id LIMIT 1", (key,)
            ).fetchone()
            if first is not None and self.deduplicates:
                self.db.execute("COMMIT")
                receipt: dict[str, Any] = json.loads(first[0])
                return receipt
            (count,) = self.db.execute("SELECT count(*) FROM applications").fetchone()
            receipt = {"charge_id": f"ch-{count + 1}", "amount": payload["amount"]}
            self.db.execute(
                "INSERT INTO applications (key, order_name, amount, receipt) VALUES (?, ?, ?, ?)",
                (key, payload.get("order"), payload["amount"], json.dumps(receipt)),
            )
            self.db.execute("COMMIT")
            return receipt
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def saw(self, key: str, attempt: Any, *, redelivered: bool) -> None:
        self.db.execute(
            "INSERT INTO deliveries (key, attempt, redelivered) VALUES (?, ?, ?)",
            (key, attempt if isinstance(attempt, int) else None, int(redelivered)),
        )


def answer(ledger: PaymentsLedger, message: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request: the protocol's fields, and the charge's receipt. A participant
    kit's ``handle_message(kit, message)`` takes this function's place."""
    receipt = ledger.apply(message["key"], message["payload"])
    return {
        "key": message["key"],
        "effect_id": message["effect_id"],
        "attempt": message["attempt"],
        "generation": message.get("generation"),
        "applied": True,
        "evidence": receipt,
    }


@dataclass(slots=True, kw_only=True)
class Misbehaviour:
    """How the test service departs from the protocol: orders whose replies it loses, how many
    times it sends each reply, whether it replies at all."""

    lose_replies_for: set[str] = field(default_factory=set)
    replies: int = 1
    silent: bool = False


async def serve(
    url: str,
    ledger_path: Path,
    *,
    request_queue: str,
    misbehaviour: Misbehaviour,
    deduplicates: bool = True,
) -> None:
    """Consume requests until cancelled."""
    import aio_pika

    ledger = PaymentsLedger(ledger_path, deduplicates=deduplicates)
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=16)
        queue = await channel.get_queue(request_queue, ensure=False)
        async with queue.iterator() as messages:
            async for message in messages:
                request = json.loads(message.body)
                ledger.saw(
                    request["key"], request.get("attempt"), redelivered=bool(message.redelivered)
                )
                if misbehaviour.silent:
                    await message.ack()
                    continue
                reply = answer(ledger, request)
                order = request["payload"].get("order")
                times = 0 if order in misbehaviour.lose_replies_for else misbehaviour.replies
                misbehaviour.lose_replies_for.discard(order)
                for _ in range(times):
                    await channel.default_exchange.publish(
                        aio_pika.Message(
                            json.dumps(reply).encode(),
                            correlation_id=request["effect_id"],
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        ),
                        routing_key=message.reply_to or "",
                    )
                await message.ack()


async def serve_nats(
    url: str,
    ledger_path: Path,
    *,
    stream: str,
    subject: str,
    misbehaviour: Misbehaviour,
    deduplicates: bool = True,
) -> None:
    """Consume requests from a JetStream stream until cancelled; replies go to the subject
    each request names (``Lf-Reply-To``), acknowledged after the reply's PubAck."""
    import nats
    import nats.errors
    from nats.js.api import ConsumerConfig

    ledger = PaymentsLedger(ledger_path, deduplicates=deduplicates)
    connection = await nats.connect(url)
    try:
        jetstream = connection.jetstream()
        requests = await jetstream.pull_subscribe(
            f"{subject}.>",
            durable="payments-service",
            stream=stream,
            config=ConsumerConfig(ack_wait=5.0),
        )
        while True:
            try:
                messages = await requests.fetch(16, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for message in messages:
                request = json.loads(message.data)
                redelivered = message.metadata.num_delivered > 1
                ledger.saw(request["key"], request.get("attempt"), redelivered=redelivered)
                if not misbehaviour.silent:
                    reply = json.dumps(answer(ledger, request)).encode()
                    order = request["payload"].get("order")
                    lost = order in misbehaviour.lose_replies_for
                    misbehaviour.lose_replies_for.discard(order)
                    for _ in range(0 if lost else misbehaviour.replies):
                        await jetstream.publish((message.headers or {})["Lf-Reply-To"], reply)
                await message.ack()
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("ledger", type=Path)
    parser.add_argument("--request-queue", default="payments.requests")
    parser.add_argument("--lose-replies-for", action="append", default=[])
    parser.add_argument("--replies", type=int, default=1)
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--no-dedupe", action="store_true")
    parser.add_argument("--nats-stream", help="consume this JetStream stream (a nats:// URL)")
    parser.add_argument("--nats-subject", help="the requests' subject, before the operation")
    options = parser.parse_args()
    misbehaviour = Misbehaviour(
        lose_replies_for=set(options.lose_replies_for),
        replies=options.replies,
        silent=options.silent,
    )
    if options.nats_stream:
        served = serve_nats(
            options.url,
            options.ledger,
            stream=options.nats_stream,
            subject=options.nats_subject,
            misbehaviour=misbehaviour,
            deduplicates=not options.no_dedupe,
        )
    else:
        served = serve(
            options.url,
            options.ledger,
            request_queue=options.request_queue,
            misbehaviour=misbehaviour,
            deduplicates=not options.no_dedupe,
        )
    asyncio.run(served)


if __name__ == "__main__":
    main()
