"""The relay of a participant reached through RabbitMQ: its replies and dead letters into the
journal (internal; the front door exports :class:`RabbitMQRelay`).

Publishing is the worker's: an effect's committed intent is its outbox record, and the worker
that drives the instance publishes it and records the confirm as ACCEPTED
(:mod:`ledgerflow.participant.rabbitmq`). This relay carries what comes back, on the path a
completion callback takes (:meth:`~ledgerflow.runtime.engine.Engine.complete_effect`):

- a reply completes the effect its key names, deduplicated by (key, attempt); a reply for an
  attempt the effect has moved past, or naming another effect than its key's, or for an
  ended instance, is kept in the instance's inbox as refused, with the reason;
- a reply no effect has the key of, or that is not the protocol, is dead-lettered to the
  route's unmatched queue, kept for a person;
- a request the broker dead-lettered (its quorum queue's delivery limit spent, or refused by
  the consumer) makes the effect UNKNOWN and parks its instance for a person, with the broker's
  delivery count as evidence: never a silent drop, never read as applied or not.

Every message is acknowledged only after the journal committed what it says; a relay killed
before that gets it again, and the repeat is a duplicate. At start :meth:`RabbitMQRelay.check`
proves the route's claims and refuses to run on a lie.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ledgerflow import limits
from ledgerflow.errors import (
    ConcurrencyError,
    ConfigurationError,
    InstanceNotFoundError,
    LedgerflowError,
    PayloadError,
)
from ledgerflow.model.broker import RabbitMQRoute
from ledgerflow.runtime import faults
from ledgerflow.runtime.core import DeliveryOutcome

if TYPE_CHECKING:
    import aio_pika.abc

    from ledgerflow.runtime.engine import Engine

log = logging.getLogger("ledgerflow.relay")


class RabbitMQRelay:
    """Consumes one RabbitMQ route's replies and dead letters into an engine's journal.

    Example::

        relay = lf.RabbitMQRelay(engine, payments.route)
        await relay.check()  # refuses (ConfigurationError) a broker that lies
        task = asyncio.create_task(relay.run())
        ...
        relay.stop()
        await task

    ``counts`` says what it did: replies ``completed`` (kept for the effect's wait),
    ``duplicate``, ``refused`` (kept as refused), ``unmatched`` (dead-lettered) and
    ``dead_lettered`` (requests the broker gave up on).
    """

    def __init__(
        self, engine: Engine, route: RabbitMQRoute, *, prefetch: int = limits.RELAY_PREFETCH
    ) -> None:
        self.engine = engine
        self.route = route
        self.prefetch = prefetch
        self.counts = dict.fromkeys(
            ("completed", "duplicate", "refused", "unmatched", "dead_lettered"), 0
        )
        self._stopping = asyncio.Event()

    async def check(self) -> list[str]:
        """Prove what the route claims of the broker: every queue exists, durable, a quorum
        queue, requests and replies dead-lettered to their queues. Refused, naming the lie,
        with :class:`~ledgerflow.errors.ConfigurationError`; the facts proven otherwise."""
        import aio_pika
        from aio_pika.exceptions import ChannelClosed

        proven: list[str] = []
        route = self.route
        connection = await aio_pika.connect(route.url)
        async with connection:
            for exchange in (route.exchange, route.dead_letter_exchange):
                channel = await connection.channel()
                try:
                    await channel.declare_exchange(exchange, passive=True)
                except ChannelClosed as error:
                    raise self._refused(f"exchange {exchange!r} does not exist", error) from None
                proven.append(f"exchange {exchange} exists")
            for queue in route.queues():
                channel = await connection.channel()
                try:
                    await channel.declare_queue(queue, passive=True)
                except ChannelClosed as error:
                    raise self._refused(f"queue {queue!r} does not exist", error) from None
                # Declaring an existing queue with other arguments is refused by the broker
                # (PRECONDITION_FAILED): so this declaration proves the queue's own arguments.
                wanted = route.arguments(queue)
                channel = await connection.channel()
                try:
                    await channel.declare_queue(queue, durable=True, arguments=wanted)
                except ChannelClosed as error:
                    raise self._refused(
                        f"queue {queue!r} is not a durable queue with {wanted}", error
                    ) from None
                proven.append(f"queue {queue} is durable with {wanted}")
        return proven

    def _refused(self, what: str, error: BaseException) -> ConfigurationError:
        return ConfigurationError(
            f"rabbitmq participant {self.route.participant}: {what} ({error}); the relay "
            f"refuses to run on a broker that does not keep what the route claims"
        )

    def stop(self) -> None:
        """Ask :meth:`run` to return (what it has not acknowledged, the broker delivers again)."""
        self._stopping.set()

    async def run(self) -> None:
        """Check the route, then consume its reply and dead-letter queues until :meth:`stop`;
        a lost connection is opened again (what was not acknowledged is delivered again)."""
        from aio_pika.exceptions import AMQPError

        await self.check()
        await consume_until_stopped(
            self._consume,
            stopping=self._stopping,
            lost=(OSError, AMQPError, ConnectionError),
            participant=self.route.participant,
        )

    async def _consume(self) -> None:
        """Consume on one connection until :meth:`stop` (returns) or the connection is lost
        (raises)."""
        import aio_pika

        connection = await aio_pika.connect(
            self.route.url,
            client_properties={"connection_name": f"ledgerflow relay {self.route.reply_queue}"},
        )
        async with connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=self.prefetch)
            replies = await channel.get_queue(self.route.reply_queue, ensure=False)
            dead = await channel.get_queue(self.route.dead_letter_queue, ensure=False)
            # A close from the broker's side is told by the close callbacks only.
            lost = asyncio.Event()
            connection.close_callbacks.add(lambda *_: lost.set())
            await replies.consume(self._reply)
            await dead.consume(self._dead_letter)
            waits = {asyncio.ensure_future(e.wait()) for e in (lost, self._stopping)}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            if not self._stopping.is_set():
                raise ConnectionError("the broker closed the connection")

    async def _reply(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        verdict = await journal_reply(
            self.engine, message.body, self.counts, participant=self.route.participant
        )
        if verdict == "unmatched":
            await self._unmatched(message)
        elif verdict == "again":
            await message.nack(requeue=True)
        else:
            await message.ack()  # only now that the journal holds it

    async def _unmatched(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        # Refused without requeue: the reply queue dead-letters it to the unmatched queue.
        await message.reject(requeue=False)

    async def _dead_letter(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        key = message.message_id
        evidence = _death(message.headers)
        if evidence.get("reason") == "delivery_limit":
            # The broker delivered it as often as the queue's limit (proven by check()).
            evidence["delivery_limit"] = self.route.delivery_limit
        if key is None:
            log.warning("relay %s: a dead letter without a message id", self.route.participant)
            await message.ack()
            return
        await journal_dead_letter(
            self.engine,
            key,
            message.body,
            evidence,
            self.counts,
            participant=self.route.participant,
        )
        await message.ack()


async def consume_until_stopped(
    consume: Callable[[], Awaitable[None]],
    *,
    stopping: asyncio.Event,
    lost: tuple[type[BaseException], ...],
    participant: str,
) -> None:
    """Run ``consume`` (one connection's consumption) until ``stopping`` is set; a connection
    lost (one of ``lost`` raised) is opened again after a pause (0.1 s, doubling to 5 s)."""
    pause = limits.RELAY_RECONNECT_SECONDS_MIN
    while not stopping.is_set():
        try:
            await consume()
        except lost as error:
            log.warning("relay %s: %s; connecting again", participant, error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), pause)
            pause = min(pause * 2, limits.RELAY_RECONNECT_SECONDS_MAX)
        else:
            pause = limits.RELAY_RECONNECT_SECONDS_MIN


async def journal_dead_letter(
    engine: Engine,
    key: str,
    request: bytes,
    evidence: dict[str, Any],
    counts: dict[str, int],
    *,
    participant: str,
    fence_attempt: bool = True,
) -> None:
    """Carry a request the broker gave up on into the journal: its effect goes UNKNOWN and its
    instance to a person, with the broker's ``evidence`` (its delivery count...) and the
    request's attempt and generation; never a silent drop, never read as applied or not."""
    try:
        body = json.loads(request)
    except ValueError:
        body = None
    attempt = body.get("attempt") if isinstance(body, dict) else None
    generation = body.get("generation") if isinstance(body, dict) else None
    if _integer(generation):
        evidence["generation"] = generation
    try:
        await engine.complete_effect(
            key,
            applied=False,
            reason="dead-lettered by the broker",
            event_id=f"dead-letter:{key}:{attempt}",
            attempt=attempt if _integer(attempt) else None,
            attempt_fenced=fence_attempt,
            dead_letter=evidence,
        )
    except (InstanceNotFoundError, ConcurrencyError) as error:
        log.warning("relay %s: dead letter %s: %s", participant, key, error)
    counts["dead_lettered"] += 1


async def journal_reply(
    engine: Engine,
    body: bytes,
    counts: dict[str, int],
    *,
    participant: str,
    fence_attempt: bool = True,
) -> str:
    """Carry one reply into the journal, on the callback's path; what to tell the broker:
    ``"ack"`` (the journal holds it: kept, a duplicate, or kept refused), ``"unmatched"`` (no
    effect takes it: a person's) or ``"again"`` (the journal could not take it now). Without
    ``fence_attempt`` a reply for an earlier attempt is not refused (a broker that keeps one
    message per key answers only the first attempt it stored)."""
    reply = _reply_fields(body)
    if reply is None:
        log.warning("relay %s: a reply that is not the protocol", participant)
        counts["unmatched"] += 1
        return "unmatched"
    key, attempt = reply["key"], reply["attempt"]
    if faults.plan is not None:
        faults.point("relay.before_commit", key=key, attempt=attempt)
    # One event per (key, effect, attempt): repeats of a reply are one event, and a reply
    # naming another effect is an event of its own, kept refused.
    named = hashlib.sha256(f"{key}\n{reply['effect_id']}".encode()).hexdigest()[:24]
    try:
        delivered = await engine.complete_effect(
            key,
            applied=reply["applied"],
            evidence=reply.get("evidence"),
            reason=reply.get("reason"),
            event_id=f"reply:{named}:{attempt}",
            attempt=attempt,
            attempt_fenced=fence_attempt,
            effect_id=reply["effect_id"],
            generation=reply.get("generation"),
        )
    except (InstanceNotFoundError, ConcurrencyError, PayloadError) as error:
        # No effect has this key, the participant answered one attempt two ways, or the reply
        # cannot be kept as it is.
        log.warning("relay %s: reply for %s unmatched: %s", participant, key, error)
        counts["unmatched"] += 1
        return "unmatched"
    except LedgerflowError as error:
        # The journal could not take it now (unavailable, busy): the broker keeps it.
        log.warning("relay %s: reply for %s not kept yet: %s", participant, key, error)
        return "again"
    if faults.plan is not None:
        faults.point("relay.before_ack", key=key, attempt=attempt)
    outcome = delivered.outcome
    if outcome is DeliveryOutcome.ACCEPTED:
        counts["completed"] += 1
    elif outcome is DeliveryOutcome.DUPLICATE:
        counts["duplicate"] += 1
    else:
        counts["refused"] += 1
    return "ack"


def _reply_fields(body: bytes) -> dict[str, Any] | None:
    """A reply's fields, or None when it is not the protocol (then it proves nothing).

    Two shapes say the same: ``"applied": bool`` with ``evidence`` or ``reason`` (a hand-written
    consumer, the demo's), and the participant kit's ``"status": "applied"`` with its
    ``receipt`` or ``"status": "rejected"`` with its error
    (:func:`ledgerflow.participant.handle_message`); both echo the request's ``key``,
    ``effect_id``, ``attempt`` and ``generation``. A kit reply's ``duplicate`` flag is not
    evidence: a redelivery's answer is the same event as the first one's.
    """
    try:
        reply = json.loads(body)
    except ValueError:
        return None
    if not isinstance(reply, dict):
        return None
    status = reply.get("status")
    if "applied" not in reply and status == "applied":
        reply = {**reply, "applied": True, "evidence": reply.get("receipt")}
    elif "applied" not in reply and status == "rejected":
        why = f"{reply.get('error_code')}: {reply.get('message')}"
        reply = {**reply, "applied": False, "reason": why}
    generation = reply.get("generation")
    typed = (
        isinstance(reply.get("key"), str)
        and isinstance(reply.get("effect_id"), str)
        and _integer(reply.get("attempt"))
        and isinstance(reply.get("applied"), bool)
        and (generation is None or _integer(generation))
    )
    return reply if typed else None


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _death(headers: Any) -> dict[str, Any]:
    """The broker's own account of a dead-lettered request: its delivery count, why and from
    which queue (the ``x-death`` and ``x-delivery-count`` headers)."""
    headers = dict(headers or {})
    evidence: dict[str, Any] = {}
    for name in ("x-delivery-count", "x-first-death-queue", "x-first-death-reason"):
        value = headers.get(name)
        if value is not None:
            evidence[name] = value if isinstance(value, int) else str(value)
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        first = deaths[0]
        evidence["count"] = int(first.get("count", 0))
        evidence["reason"] = str(first.get("reason", ""))
        evidence["queue"] = str(first.get("queue", ""))
    return evidence
