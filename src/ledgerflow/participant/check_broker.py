"""The contract check's transports over a message broker: RabbitMQ and NATS JetStream.

The claims are :mod:`ledgerflow.participant.check`'s, written once; what differs is how a
request travels and how its answer is read:

- An apply is published on the participant's declared route (RabbitMQ: its exchange, the
  operation as routing key, ``mandatory``, with publisher confirms; NATS: the subject
  ``{subject}.{operation}`` its stream keeps), with the protocol's body and correlation. The
  answer is the participant's reply, read as the relay reads it (``applied`` true with
  evidence naming the request's key or effect, or ``applied`` false: a rejection, nothing
  applied). No reply within the timeout, an unroutable publish or a broker that took no
  position is no answer, kept as the evidence.
- Replies come back to the checker's own place, never the route's reply queue or subject, so
  a relay running beside the check does not take them (and a person does not find them
  unmatched): RabbitMQ, an exclusive queue the broker names, as ``reply_to``; NATS, a stream of
  the check's own (``Lf-Reply-To``), deleted at the end.
- NATS only: the request stream drops a message whose ``Nats-Msg-Id`` it keeps already, which
  would answer a repeat for the participant and hide whether the participant itself
  deduplicates (what protects the key after the stream's window, or on a redelivery). So each
  of the check's publishes has its own message id, ``{key}#{attempt}``, the key in the body.
- Lookups have no broker path: neither the route nor the relay carries one. A lookup is asked
  the way the engine asks it, through the participant's declared lookup function
  (``@participant.lookup``); without one the lookup claims are not claimed.

Each request carries ``generation`` 1, which the kit's broker consumer
(:func:`ledgerflow.participant.handle_message`) requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import uuid
from typing import TYPE_CHECKING, Any

from ledgerflow.errors import ParticipantUnreachableError
from ledgerflow.model.effect import LookupAnswer
from ledgerflow.participant.check import Clock, Exchange
from ledgerflow.participant.nats import NatsParticipant
from ledgerflow.participant.rabbitmq import RabbitMQParticipant
from ledgerflow.participant.remote import names_another
from ledgerflow.redaction import redact

if TYPE_CHECKING:
    import aio_pika.abc
    import nats.aio.client

BrokerParticipant = RabbitMQParticipant | NatsParticipant


class _BrokerTransport:
    """What both brokers share: replies awaited by (key, attempt), read as the relay reads
    them; lookups through the declared lookup function."""

    def __init__(
        self, participant: BrokerParticipant, url: str, *, timeout_seconds: float, clock: Clock
    ) -> None:
        self.participant = participant
        self.url = url
        self.target = redact(url)
        self.timeout_seconds = timeout_seconds
        self.clock = clock
        self.strays: list[Any] = []
        self._waiting: dict[tuple[str, int], asyncio.Future[Any]] = {}

    def _replied(self, data: bytes) -> None:
        """One reply in: it answers the apply its key and attempt name, or it is a stray."""
        try:
            reply: Any = json.loads(data)
        except ValueError:
            reply = data[:500].decode(errors="replace")
        named = (reply.get("key"), reply.get("attempt")) if isinstance(reply, dict) else None
        waiting = self._waiting.get(named) if named is not None else None  # type: ignore[arg-type]
        if waiting is None or waiting.done():
            self.strays.append(reply)
        else:
            waiting.set_result(reply)

    async def _publish(self, body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """Publish one request: what the evidence shows of it, and why it proves nothing
        (None once the broker took it)."""
        raise NotImplementedError

    async def apply(self, body: dict[str, Any]) -> Exchange:
        sent = self.clock()
        waiting = asyncio.get_running_loop().create_future()
        self._waiting[(body["key"], body["attempt"])] = waiting
        try:
            shown, refused = await self._publish({**body, "generation": 1})
            if refused is not None:
                return Exchange("apply", shown, None, refused, sent, self.clock())
            try:
                reply = await asyncio.wait_for(waiting, self.timeout_seconds)
            except TimeoutError:
                reply = f"no reply within {self.timeout_seconds:g} s"
            return Exchange("apply", shown, None, reply, sent, self.clock())
        finally:
            del self._waiting[(body["key"], body["attempt"])]

    async def lookup(self, key: str, attempt: int) -> Exchange:
        shown = {"CALL": f"lookup({key}, attempt={attempt})"}
        sent = self.clock()
        function = self.participant.lookup_function
        if function is None:
            return Exchange("lookup", shown, None, "no lookup declared", sent, self.clock())
        try:
            found: Any = function(key, attempt)  # type: ignore[arg-type]
            if inspect.isawaitable(found):
                found = await asyncio.wait_for(found, self.timeout_seconds)
        except Exception as error:  # noqa: BLE001 - the engine reads a raise as no answer.
            raised = {"raised": f"{type(error).__name__}: {error}"}
            return Exchange("lookup", shown, None, raised, sent, self.clock())
        answer: Any = {"not_a_lookup_answer": repr(found)[:500]}
        if isinstance(found, LookupAnswer):
            answer = {"verdict": found.verdict.value}
            if found.evidence is not None:
                answer["evidence"] = found.evidence
        return Exchange("lookup", shown, None, answer, sent, self.clock())

    def receipt(self, exchange: Exchange, key: str, effect_id: str) -> Any:
        answer = exchange.answer
        if not isinstance(answer, dict) or answer.get("applied") is not True:
            return None
        evidence = answer.get("evidence")
        if evidence is None or names_another(answer, evidence, key=key, effect_id=effect_id):
            return None
        return evidence

    def rejected(self, exchange: Exchange) -> bool:
        answer = exchange.answer
        return isinstance(answer, dict) and answer.get("applied") is False

    def verdict(self, exchange: Exchange, key: str) -> str:
        # The engine takes a lookup function's answer as it is (runtime/effects.py): anything
        # but a LookupAnswer is "cannot tell", a raise is no answer.
        answer = exchange.answer
        if not isinstance(answer, dict) or "raised" in answer:
            return "no answer"
        found = answer.get("verdict")
        return found if found in ("applied", "not-applied", "unknown") else "unknown"


class RabbitMQTransport(_BrokerTransport):
    """Publishes to the participant's exchange; replies to an exclusive queue of the check's."""

    participant: RabbitMQParticipant

    def __init__(
        self, participant: RabbitMQParticipant, url: str, *, timeout_seconds: float, clock: Clock
    ) -> None:
        super().__init__(participant, url, timeout_seconds=timeout_seconds, clock=clock)
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self._reply_to = ""

    async def _open(self) -> aio_pika.abc.AbstractChannel:
        import aio_pika

        if self._channel is not None:
            return self._channel
        try:
            self._connection = await aio_pika.connect(self.url)
        except (OSError, aio_pika.exceptions.AMQPError) as error:
            raise ParticipantUnreachableError(
                f"participant {self.participant.name}: the broker at {self.target} cannot be "
                f"reached: {error}",
                url=self.target,
            ) from None
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        self._reply_to = queue.name

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            self._replied(message.body)

        await queue.consume(on_reply, no_ack=True)
        self._channel = channel
        return channel

    async def _publish(self, body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        import aio_pika
        from aio_pika.exceptions import DeliveryError

        route = self.participant.route
        channel = await self._open()
        shown: dict[str, Any] = {
            "PUBLISH": f"exchange {route.exchange} routing key {body['operation']}",
            "body": body,
        }
        message = aio_pika.Message(
            json.dumps(body).encode(),
            message_id=body["key"],
            correlation_id=body["effect_id"],
            reply_to=self._reply_to,
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            type=body["operation"],
            headers={"attempt": body["attempt"], "effect_id": body["effect_id"]},
        )
        try:
            exchange = await channel.get_exchange(route.exchange, ensure=False)
            await exchange.publish(message, routing_key=body["operation"], mandatory=True)
        except DeliveryError as error:
            return shown, f"the broker did not take the publish: {error}"
        except (OSError, aio_pika.exceptions.AMQPError) as error:
            return shown, f"publish failed: {type(error).__name__}: {error}"
        return shown, None

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.close()


class NatsTransport(_BrokerTransport):
    """Publishes to the participant's stream; replies to a stream of the check's own."""

    participant: NatsParticipant

    def __init__(
        self, participant: NatsParticipant, url: str, *, timeout_seconds: float, clock: Clock
    ) -> None:
        super().__init__(participant, url, timeout_seconds=timeout_seconds, clock=clock)
        self._connection: nats.aio.client.Client | None = None
        token = uuid.uuid4().hex[:12]
        self._reply_stream = f"LF_CHECK_{token}"
        self._reply_subject = f"lf-check.{token}.replies"

    async def _open(self) -> nats.aio.client.Client:
        import nats
        import nats.errors
        from nats.js.api import StorageType, StreamConfig

        if self._connection is not None:
            return self._connection
        try:
            connection = await nats.connect(
                self.url, allow_reconnect=False, connect_timeout=self.timeout_seconds
            )
        except (OSError, nats.errors.Error) as error:
            raise ParticipantUnreachableError(
                f"participant {self.participant.name}: the NATS server at {self.target} cannot "
                f"be reached: {error}",
                url=self.target,
            ) from None
        self._connection = connection
        # The participant publishes its reply to JetStream: a stream must keep the subject.
        await connection.jetstream().add_stream(
            StreamConfig(
                name=self._reply_stream,
                subjects=[self._reply_subject],
                storage=StorageType.MEMORY,
            )
        )

        async def on_reply(message: Any) -> None:
            self._replied(message.data)

        await connection.subscribe(self._reply_subject, cb=on_reply)
        return connection

    async def _publish(self, body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        import nats.errors

        route = self.participant.route
        connection = await self._open()
        subject = f"{route.subject}.{body['operation']}"
        headers = {
            "Nats-Msg-Id": f"{body['key']}#{body['attempt']}",
            "Lf-Effect-Id": body["effect_id"],
            "Lf-Attempt": str(body["attempt"]),
            "Lf-Reply-To": self._reply_subject,
        }
        shown: dict[str, Any] = {"PUBLISH": f"{subject} ({headers['Nats-Msg-Id']})", "body": body}
        try:
            ack = await connection.jetstream().publish(
                subject, json.dumps(body).encode(), headers=headers, timeout=self.timeout_seconds
            )
        except (TimeoutError, OSError, nats.errors.Error) as error:
            return shown, f"the stream did not take the publish: {type(error).__name__}: {error}"
        if ack.duplicate:
            return shown, f"the stream {ack.stream} dropped it as a duplicate"
        return shown, None

    async def aclose(self) -> None:
        import nats.js.errors

        if self._connection is None:
            return
        # The stream is in memory: should its delete fail, the server's restart drops it.
        with contextlib.suppress(nats.js.errors.Error):
            await self._connection.jetstream().delete_stream(self._reply_stream)
        await self._connection.close()


def broker_transport(
    participant: BrokerParticipant, url: str | None, *, timeout_seconds: float, clock: Clock
) -> RabbitMQTransport | NatsTransport:
    """The transport of a participant declared over a broker, at ``url`` (default: the
    declared route's server). ``ValueError`` for a URL of another broker than the declared."""
    nats = isinstance(participant, NatsParticipant)
    schemes = ("nats://", "tls://") if nats else ("amqp://", "amqps://")
    if url is None:
        url = participant.route.url
    elif not url.startswith(schemes):
        raise ValueError(
            f"participant {participant.name} is declared over "
            f"{'NATS' if nats else 'RabbitMQ'}: "
            f"the broker URL starts with {' or '.join(schemes)}, not {redact(url)!r}"
        )
    if isinstance(participant, NatsParticipant):
        return NatsTransport(participant, url, timeout_seconds=timeout_seconds, clock=clock)
    return RabbitMQTransport(participant, url, timeout_seconds=timeout_seconds, clock=clock)
