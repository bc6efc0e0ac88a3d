"""The relay of a participant reached through NATS JetStream: its replies into the journal
(internal; the front door exports :class:`NatsRelay`).

As the RabbitMQ relay (:mod:`ledgerflow.runtime.relay`), and through the same
:func:`~ledgerflow.runtime.relay.journal_reply`: a reply completes its effect on the
callback's path, deduplicated, a foreign or late one kept refused (not a reply for an earlier
attempt: within its window the stream keeps one message per key, the first attempt's); a message is
acknowledged only after the journal commit, so a redelivery (a relay killed, an ack after the
consumer's ack wait) is a duplicate and changes nothing. A reply no effect takes is
terminated: it stays in the reply stream, for a person, and is not delivered again.

A request the participant's consumer was given ``max_deliver`` times without an ack is told by
the server's max-deliveries advisory, which the route's dead-letter stream keeps: the relay
reads the request back by its sequence and, through the RabbitMQ dead letter's path
(:func:`~ledgerflow.runtime.relay.journal_dead_letter`), makes the effect UNKNOWN and parks its
instance with the server's delivery count as evidence.

At start :meth:`NatsRelay.check` proves the route's claims: the three streams exist on file
storage, the dead-letter one keeps the request stream's advisories, and the request stream's
duplicate window covers the route's retry horizon (a same-key re-publish later than the
window would be stored, and delivered, again).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from typing import TYPE_CHECKING

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError
from ledgerflow.model.broker import NatsRoute
from ledgerflow.runtime.relay import consume_until_stopped, journal_dead_letter, journal_reply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

    from ledgerflow.runtime.engine import Engine

log = logging.getLogger("ledgerflow.relay")


class NatsRelay:
    """Consumes one NATS route's replies into an engine's journal.

    Example::

        relay = lf.NatsRelay(engine, payments.route)
        task = asyncio.create_task(relay.run())  # checks the streams first
        ...
        relay.stop()
        await task

    ``counts`` says what it did, as :class:`RabbitMQRelay`'s (``dead_lettered``: requests the
    participant's consumer was given ``max_deliver`` times without an ack).
    """

    def __init__(
        self, engine: Engine, route: NatsRoute, *, batch: int = limits.RELAY_PREFETCH
    ) -> None:
        self.engine = engine
        self.route = route
        self.batch = batch
        self.counts = dict.fromkeys(
            ("completed", "duplicate", "refused", "unmatched", "dead_lettered"), 0
        )
        self._stopping = asyncio.Event()

    async def check(self) -> list[str]:
        """Prove what the route claims of the server: its streams exist, on file storage, the
        dead-letter one keeps the max-deliveries advisories, the request stream's duplicate
        window at least the retry horizon. Refused, naming the lie,
        with :class:`~ledgerflow.errors.ConfigurationError`; the facts proven otherwise."""
        import nats
        import nats.js.errors
        from nats.js.api import StorageType

        route = self.route
        proven = []
        connection = await nats.connect(route.url)
        try:
            jetstream = connection.jetstream()
            for stream in (route.stream, route.reply_stream, route.dead_letter_stream):
                try:
                    info = await jetstream.stream_info(stream)
                except nats.js.errors.NotFoundError:
                    raise self._refused(f"stream {stream!r} does not exist") from None
                # The server's answer may leave the storage type as its wire text.
                storage = getattr(info.config.storage, "value", info.config.storage)
                if storage != StorageType.FILE.value:
                    raise self._refused(f"stream {stream!r} is not on file storage")
                proven.append(f"stream {stream} exists on file storage")
            info = await jetstream.stream_info(route.dead_letter_stream)
            if route.dead_letter_subject not in (info.config.subjects or []):
                raise self._refused(
                    f"stream {route.dead_letter_stream!r} does not keep the max-deliveries "
                    f"advisories {route.dead_letter_subject!r}"
                )
            proven.append(
                f"stream {route.dead_letter_stream} keeps {route.dead_letter_subject}: a request "
                f"given up on reaches a person"
            )
            info = await jetstream.stream_info(route.stream)
            window = info.config.duplicate_window or 0.0
            if window < route.retry_horizon_seconds:
                raise self._refused(
                    f"stream {route.stream!r} keeps message ids for {window:g}s, shorter than "
                    f"the retry horizon of {route.retry_horizon_seconds:g}s"
                )
            proven.append(
                f"stream {route.stream} deduplicates for {window:g}s >= the retry horizon "
                f"{route.retry_horizon_seconds:g}s"
            )
        finally:
            await connection.close()
        return proven

    def _refused(self, what: str) -> ConfigurationError:
        return ConfigurationError(
            f"nats participant {self.route.participant}: {what}; the relay refuses to run on "
            f"a server that does not keep what the route claims"
        )

    def stop(self) -> None:
        """Ask :meth:`run` to return (what it has not acknowledged, the server delivers again)."""
        self._stopping.set()

    async def run(self) -> None:
        """Check the route, then consume its replies until :meth:`stop`. The client connects
        again by itself after a dropped connection; one it gave up on is opened again here
        (after 0.1 s, doubling to 5 s): what was not acknowledged is delivered again."""
        import nats.errors

        await self.check()
        await consume_until_stopped(
            self._consume,
            stopping=self._stopping,
            lost=(OSError, ConnectionError, nats.errors.Error),
            participant=self.route.participant,
        )

    async def _consume(self) -> None:
        """Consume on one connection until :meth:`stop` (returns) or the client gives the
        connection up (raises): the replies and the dead letters, side by side."""
        import nats
        from nats.js.api import ConsumerConfig

        connection = await nats.connect(self.route.url, allow_reconnect=True)
        try:
            jetstream = connection.jetstream()
            # A message handed to a relay that died is delivered again after the ack wait;
            # one delivered again while it is still being committed is a duplicate.
            config = ConsumerConfig(ack_wait=limits.RELAY_ACK_WAIT_SECONDS)
            replies = await jetstream.pull_subscribe(
                self.route.reply_subject,
                durable=self.route.consumer,
                stream=self.route.reply_stream,
                config=config,
            )
            dead = await jetstream.pull_subscribe(
                self.route.dead_letter_subject,
                durable=f"{self.route.consumer}-dead",
                stream=self.route.dead_letter_stream,
                config=config,
            )
            pulls = [
                asyncio.ensure_future(self._pull(connection, replies, self._reply)),
                asyncio.ensure_future(
                    self._pull(connection, dead, functools.partial(self._dead_letter, jetstream))
                ),
            ]
            done, pending = await asyncio.wait(pulls, return_when=asyncio.FIRST_EXCEPTION)
            for pull in pending:
                pull.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for pull in done:
                pull.result()  # a lost connection raises here
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _pull(
        self,
        connection: Client,
        subscription: JetStreamContext.PullSubscription,
        handle: Callable[[Msg], Awaitable[None]],
    ) -> None:
        import nats.errors

        while not self._stopping.is_set():
            if connection.is_closed:
                raise ConnectionError("the client gave the connection up")
            try:
                messages = await subscription.fetch(self.batch, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for message in messages:
                await handle(message)

    async def _reply(self, message: Msg) -> None:
        # The stream keeps one message per key within its window, so the participant can only
        # answer the attempt it stored: a reply is fenced by its effect, not by its attempt.
        verdict = await journal_reply(
            self.engine,
            message.data,
            self.counts,
            participant=self.route.participant,
            fence_attempt=False,
        )
        if verdict == "unmatched":
            await message.term()
        elif verdict == "again":
            await message.nak(delay=1.0)
        else:
            await message.ack()  # only now that the journal holds it

    async def _dead_letter(self, jetstream: JetStreamContext, message: Msg) -> None:
        """A max-deliveries advisory: the participant's consumer was given a request
        ``max_deliver`` times without an ack, and the server gave up on it."""
        import nats.js.errors

        try:
            advisory = json.loads(message.data)
            stream, seq = advisory["stream"], int(advisory["stream_seq"])
        except (ValueError, KeyError, TypeError):
            log.warning("relay %s: an advisory that is not one", self.route.participant)
            await message.term()  # kept in the dead-letter stream, for a person
            return
        try:
            request = await jetstream.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            log.warning(
                "relay %s: request %s/%s given up on is no longer in its stream",
                self.route.participant,
                stream,
                seq,
            )
            await message.term()
            return
        key = (request.headers or {}).get("Nats-Msg-Id")
        if not key:
            log.warning("relay %s: a request given up on without a key", self.route.participant)
            await message.term()
            return
        evidence = {
            "reason": "max_deliveries",
            "deliveries": advisory.get("deliveries"),
            "stream": stream,
            "stream_seq": seq,
            "consumer": advisory.get("consumer"),
        }
        # Fenced by its effect only, as a reply: the stream keeps the first attempt stored.
        await journal_dead_letter(
            self.engine,
            key,
            request.data or b"",
            evidence,
            self.counts,
            participant=self.route.participant,
            fence_attempt=False,
        )
        await message.ack()  # only now that the journal holds it
