"""Where a participant's requests and replies travel over a message broker (internal).

A participant reached through RabbitMQ is declared with its route: the exchange its requests
are published to (routing key: the operation), the queue it consumes them from, the
dead-letter exchange and queue its exhausted deliveries go to, and the queue its replies come
back on. The route is data the publishing side (:mod:`ledgerflow.participant.rabbitmq`) and
the relay that consumes replies and dead letters (:mod:`ledgerflow.runtime.relay`) both read;
neither imports the other. The relay proves at start that the broker keeps what the route
claims (durable quorum queues, a dead-letter route) and refuses to run otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledgerflow import limits


@dataclass(frozen=True, slots=True, kw_only=True)
class RabbitMQRoute:
    """One participant's topology on a RabbitMQ broker, as its declaration claims it."""

    participant: str
    url: str
    exchange: str
    request_queue: str
    dead_letter_exchange: str
    dead_letter_queue: str
    reply_queue: str
    # Deliveries of one request before the broker dead-letters it (a quorum queue's
    # x-delivery-limit): a poison request goes to a person, not round and round.
    delivery_limit: int = limits.BROKER_DELIVERY_LIMIT_DEFAULT

    @property
    def unmatched_queue(self) -> str:
        """Where replies the relay cannot deliver to any effect (no effect has their key, or
        they are not the protocol) are dead-lettered and kept for a person."""
        return f"{self.reply_queue}.unmatched"

    def arguments(self, queue: str) -> dict[str, Any]:
        """The arguments a queue of the route is declared with. The request and reply queues are
        quorum queues (durable, replicated, with a delivery limit) whose exhausted or refused
        messages are dead-lettered, never dropped: requests to the dead-letter queue the relay
        consumes, replies to the unmatched queue a person reads."""
        if queue in (self.dead_letter_queue, self.unmatched_queue):
            return {"x-queue-type": "quorum"}
        if queue == self.request_queue:
            return {
                "x-queue-type": "quorum",
                "x-dead-letter-exchange": self.dead_letter_exchange,
                "x-dead-letter-routing-key": DEAD,
                "x-delivery-limit": self.delivery_limit,
            }
        return {
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": self.dead_letter_exchange,
            "x-dead-letter-routing-key": UNMATCHED,
        }

    def queues(self) -> tuple[str, ...]:
        """Every queue of the route: requests, replies, dead letters, unmatched replies."""
        return (self.request_queue, self.reply_queue, self.dead_letter_queue, self.unmatched_queue)


# The dead-letter exchange's routing keys: an exhausted request, a reply no effect takes.
DEAD = "dead"
UNMATCHED = "unmatched"


@dataclass(frozen=True, slots=True, kw_only=True)
class NatsRoute:
    """One participant's streams on a NATS JetStream server, as its declaration claims them.

    Requests are published to ``{subject}.{operation}``, which the ``stream`` keeps and
    deduplicates by ``Nats-Msg-Id`` (the effect's idempotency key) within its duplicate window;
    replies are published to ``reply_subject``, kept by ``reply_stream`` and read by the
    relay's durable ``consumer``. ``retry_horizon_seconds`` is the longest time between a key's
    first publish and its last same-key re-publish: the stream's duplicate window must cover it,
    or a late re-publish would be stored again. A request the participant's consumer gave up on
    (``max_deliver`` spent) is told by the server's advisory, kept by ``dead_letter_stream``.
    """

    participant: str
    url: str
    stream: str
    subject: str
    reply_stream: str
    reply_subject: str
    consumer: str
    retry_horizon_seconds: float

    @property
    def dead_letter_stream(self) -> str:
        """The stream that keeps the server's max-deliveries advisories for the request
        stream: a request the participant's consumer was given ``max_deliver`` times without an
        ack, for the relay to turn into a person's decision."""
        return f"{self.stream}_DEAD"

    @property
    def dead_letter_subject(self) -> str:
        """The advisories the dead-letter stream keeps: any consumer of the request stream."""
        return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{self.stream}.*"
