"""A participant reached through RabbitMQ: the publishing side of a broker effect.

The effect's committed intent is the outbox record; its dispatch publishes one message and
waits for the broker's publisher confirm. A confirm proves only that the broker took the
message: the effect is ACCEPTED (every operation is declared ``completes_by_callback``), and it
completes when the participant's reply comes back through the relay
(:class:`ledgerflow.RabbitMQRelay`), on the same path as a callback. What a publish proves:

- ``basic.ack`` of a ``mandatory`` publish that was not returned: routed to a queue, ACCEPTED.
- ``basic.return`` (unroutable): the message reached no queue, so it is proven not sent, a
  retryable rejection; the next attempt is published under the same key.
- no connection at all: nothing left this process, proven not sent as well.
- ``basic.nack``, a confirm that never comes, a connection lost after the publish: no proof
  either way, UNKNOWN.

Each message carries the effect's idempotency key as ``message_id`` (what a deduplicating
consumer keys on), the effect id as ``correlation_id``, the attempt and the owner generation in
its headers (and its body), and the reply queue as ``reply_to``. It needs the ``brokers`` extra
(aio-pika), imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ledgerflow import limits
from ledgerflow.errors import EffectRejectedError
from ledgerflow.extras import require_extra
from ledgerflow.model.broker import DEAD, UNMATCHED, RabbitMQRoute
from ledgerflow.model.classification import Classification
from ledgerflow.model.definition import EffectCall, Participant
from ledgerflow.model.retry import DEFAULT_EFFECT_RETRY, DEFAULT_LOOKUP_RETRY, RetryPolicy
from ledgerflow.participant.declaring import (
    PerLoop,
    check_operations,
    check_url,
    per_operation,
    request_text,
)
from ledgerflow.redaction import redact

if TYPE_CHECKING:
    import aio_pika.abc

# Seconds a publish waits for its confirm when the declaration gives no timeout of its own.
CONFIRM_SECONDS_DEFAULT = 10.0
EXAMPLE_URL = "amqp://guest:guest@127.0.0.1:5672/"


class PublishOutcomeUnknown(Exception):  # noqa: N818 - named for the effect state it produces.
    """The broker took no clear position on a publish (a nack, a lost connection): UNKNOWN."""


class RabbitMQParticipant(Participant):
    """A :class:`Participant` whose effects are messages published to RabbitMQ.

    Built by :func:`rabbitmq_participant`. One connection and one confirming channel per event
    loop, opened on first publish and opened again after it closed.
    """

    def __init__(
        self,
        route: RabbitMQRoute,
        *,
        deduplicates: bool,
        lookup_retry: RetryPolicy = DEFAULT_LOOKUP_RETRY,
    ) -> None:
        super().__init__(route.participant, deduplicates=deduplicates, lookup_retry=lookup_retry)
        self.route = route
        self._channel: PerLoop[
            tuple[aio_pika.abc.AbstractConnection, aio_pika.abc.AbstractChannel]
        ] = PerLoop(self._connect, closed=lambda o: o[1].is_closed, closer=lambda o: o[0].close())

    def __repr__(self) -> str:
        return (
            f"RabbitMQParticipant({self.name!r}, {redact(self.route.url)!r}, "
            f"exchange={self.route.exchange!r}, deduplicates={self.deduplicates})"
        )

    async def _connect(
        self,
    ) -> tuple[aio_pika.abc.AbstractConnection, aio_pika.abc.AbstractChannel]:
        import aio_pika

        connection = await aio_pika.connect(
            self.route.url,
            client_properties={"connection_name": f"ledgerflow {self.route.exchange}"},
        )
        # A returned (unroutable) mandatory publish raises: told from a routed one.
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        return connection, channel

    async def aclose(self) -> None:
        """Close the running loop's connection (the loop's end closes it too)."""
        await self._channel.close()

    async def publish(self, operation: str, call: EffectCall) -> dict[str, Any]:
        """Publish one dispatch and wait for its confirm: the ACCEPTED evidence, a rejection
        proving it was not sent, or :class:`PublishOutcomeUnknown`."""
        import aio_pika
        from aio_pika.exceptions import DeliveryError

        body = request_text(self.name, operation, call).encode()
        try:
            _, channel = await self._channel.get()
            exchange = await channel.get_exchange(self.route.exchange, ensure=False)
        except (OSError, aio_pika.exceptions.AMQPError) as error:
            # No channel: nothing was published.
            raise EffectRejectedError(
                f"{self.name}.{operation}: the broker could not be reached: {error}",
                error_code="broker_unreachable",
                retryable=True,
            ) from error
        message = aio_pika.Message(
            body,
            message_id=call.idempotency_key,
            correlation_id=call.effect_id,
            reply_to=self.route.reply_queue,
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            type=operation,
            headers=correlation_headers(call),
        )
        try:
            confirm = await exchange.publish(message, routing_key=operation, mandatory=True)
        except DeliveryError as error:
            frame = error.frame
            if type(frame).__name__ == "Return":
                raise EffectRejectedError(
                    f"{self.name}.{operation}: unroutable, no queue took it "
                    f"({getattr(frame, 'reply_text', '')}): not sent",
                    error_code="unroutable",
                    retryable=True,
                ) from error
            raise PublishOutcomeUnknown(f"{self.name}.{operation}: {error}") from error
        except (OSError, aio_pika.exceptions.AMQPError) as error:
            raise PublishOutcomeUnknown(f"{self.name}.{operation}: {error!r}") from error
        return {
            "broker": "rabbitmq",
            "confirm": type(confirm).__name__,
            "exchange": self.route.exchange,
            "routing_key": operation,
            "message_id": call.idempotency_key,
        }


def correlation_headers(call: EffectCall) -> dict[str, Any]:
    """The request's correlation as headers: what the reply must echo."""
    headers: dict[str, Any] = {"attempt": call.attempt, "effect_id": call.effect_id}
    if call.generation is not None:
        headers["generation"] = call.generation
    return headers


def rabbitmq_participant(
    name: str,
    url: str,
    *,
    operations: Mapping[str, Classification | str],
    deduplicates: bool,
    reply_within_seconds: float,
    exchange: str | None = None,
    request_queue: str | None = None,
    reply_queue: str = "ledgerflow.replies",
    dead_letter_exchange: str | None = None,
    dead_letter_queue: str | None = None,
    delivery_limit: int = limits.BROKER_DELIVERY_LIMIT_DEFAULT,
    confirm_seconds: float = CONFIRM_SECONDS_DEFAULT,
    retry: RetryPolicy | None = None,
) -> RabbitMQParticipant:
    """Declare a participant reached through RabbitMQ, one effect per operation.

    Example::

        payments = rabbitmq_participant(
            "payments", "amqp://guest:guest@127.0.0.1:5672/",
            operations={"charge": "compensatable"},
            deduplicates=True, reply_within_seconds=30,
        )
        registry.add_participant(payments)

    A dispatch publishes to ``exchange`` (default: the participant's name) with the operation
    as routing key; the confirm makes the effect ACCEPTED; the participant's reply on
    ``reply_queue`` completes it, and with no reply within ``reply_within_seconds`` its outcome
    is UNKNOWN. A request delivered ``delivery_limit`` times without an ack is dead-lettered by
    the broker, and its instance goes to a person. ``deduplicates`` promises that the consumer
    applies a ``message_id`` once, however often it is delivered: only then is an UNKNOWN effect
    published again.
    """
    what = f"rabbitmq participant {name}"
    require_extra("brokers", purpose=what)
    check_url(url, what=what, schemes=("amqp://", "amqps://"), example=EXAMPLE_URL)
    check_operations(operations, what=what, example="'charge': 'compensatable'")
    route = RabbitMQRoute(
        participant=name,
        url=url,
        exchange=exchange or name,
        request_queue=request_queue or f"{name}.requests",
        dead_letter_exchange=dead_letter_exchange or f"{name}.dead",
        dead_letter_queue=dead_letter_queue or f"{name}.dead",
        reply_queue=reply_queue,
        delivery_limit=delivery_limit,
    )
    participant = RabbitMQParticipant(route, deduplicates=deduplicates)
    for operation, classification in operations.items():
        participant.effect(
            operation,
            classification=classification,
            timeout_seconds=confirm_seconds,
            retry=retry if retry is not None else DEFAULT_EFFECT_RETRY,
            completes_by_callback=reply_within_seconds,
        )(per_operation(name, operation, participant.publish))
    return participant


async def declare_topology(route: RabbitMQRoute, *, operations: tuple[str, ...]) -> None:
    """Declare a route's exchanges, queues and bindings as the relay's check expects them
    (for a participant team's set-up, the demo and tests): durable quorum queues, requests
    dead-lettered to the dead-letter queue, unmatched replies to their own queue."""
    import aio_pika

    connection = await aio_pika.connect(route.url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            route.exchange, aio_pika.ExchangeType.DIRECT, durable=True
        )
        dead = await channel.declare_exchange(
            route.dead_letter_exchange, aio_pika.ExchangeType.DIRECT, durable=True
        )
        queues = {
            name: await channel.declare_queue(name, durable=True, arguments=route.arguments(name))
            for name in route.queues()
        }
        for operation in operations:
            await queues[route.request_queue].bind(exchange, operation)
        await queues[route.dead_letter_queue].bind(dead, DEAD)
        await queues[route.unmatched_queue].bind(dead, UNMATCHED)
