"""A participant reached through NATS JetStream: the publishing side of a broker effect.

As for RabbitMQ (:mod:`ledgerflow.participant.rabbitmq`), the committed intent is the outbox
record and the worker publishes it; the stream's PubAck makes the effect ACCEPTED, never
CONFIRMED, and the participant's reply, carried by :class:`ledgerflow.NatsRelay`, completes
it. Each message carries the effect's idempotency key as ``Nats-Msg-Id``, so the stream itself
drops a same-key re-publish within its duplicate window (the PubAck says ``duplicate``). What
a publish proves:

- a PubAck: stored in the stream (or already there, a duplicate), ACCEPTED;
- no responders (no stream keeps the subject), or no connection: proven not stored, a
  retryable rejection;
- a timeout, a JetStream API error, a connection lost after the publish: UNKNOWN.

It needs the ``brokers`` extra (nats-py), imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ledgerflow.errors import EffectRejectedError
from ledgerflow.extras import require_extra
from ledgerflow.model.broker import NatsRoute
from ledgerflow.model.classification import Classification
from ledgerflow.model.definition import EffectCall, Participant
from ledgerflow.model.retry import DEFAULT_EFFECT_RETRY, RetryPolicy
from ledgerflow.participant.declaring import (
    PerLoop,
    check_operations,
    check_url,
    per_operation,
    request_text,
)
from ledgerflow.redaction import redact

if TYPE_CHECKING:
    import nats.aio.client

CONFIRM_SECONDS_DEFAULT = 10.0


class NatsPublishUnknown(Exception):  # noqa: N818 - named for the effect state it produces.
    """The stream took no clear position on a publish (a timeout, an API error): UNKNOWN."""


class NatsParticipant(Participant):
    """A :class:`Participant` whose effects are messages published to a JetStream stream.

    Built by :func:`nats_participant`; one connection per event loop, opened on first publish.
    """

    def __init__(self, route: NatsRoute, *, deduplicates: bool, confirm_seconds: float) -> None:
        super().__init__(route.participant, deduplicates=deduplicates)
        self.route = route
        self.confirm_seconds = confirm_seconds
        self._connection: PerLoop[nats.aio.client.Client] = PerLoop(
            self._connect, closed=lambda c: c.is_closed, closer=lambda c: c.close()
        )

    def __repr__(self) -> str:
        return (
            f"NatsParticipant({self.name!r}, {redact(self.route.url)!r}, "
            f"stream={self.route.stream!r}, deduplicates={self.deduplicates})"
        )

    async def _connect(self) -> nats.aio.client.Client:
        import nats

        return await nats.connect(self.route.url, allow_reconnect=True)

    async def aclose(self) -> None:
        """Close the running loop's connection."""
        await self._connection.close()

    async def publish(self, operation: str, call: EffectCall) -> dict[str, Any]:
        """Publish one dispatch and wait for the stream's PubAck: the ACCEPTED evidence, a
        rejection proving it was not stored, or :class:`NatsPublishUnknown`."""
        import nats.errors
        import nats.js.errors

        body = request_text(self.name, operation, call).encode()
        try:
            jetstream = (await self._connection.get()).jetstream()
        except (OSError, nats.errors.Error) as error:
            raise EffectRejectedError(
                f"{self.name}.{operation}: the NATS server could not be reached: {error}",
                error_code="broker_unreachable",
                retryable=True,
            ) from error
        headers = {
            "Nats-Msg-Id": call.idempotency_key,
            "Lf-Effect-Id": call.effect_id,
            "Lf-Attempt": str(call.attempt),
            "Lf-Reply-To": self.route.reply_subject,
        }
        if call.generation is not None:
            headers["Lf-Generation"] = str(call.generation)
        subject = f"{self.route.subject}.{operation}"
        try:
            ack = await jetstream.publish(
                subject, body, headers=headers, timeout=self.confirm_seconds
            )
        except nats.js.errors.NoStreamResponseError as error:
            raise EffectRejectedError(
                f"{self.name}.{operation}: no stream keeps {subject}: not stored",
                error_code="no_stream",
                retryable=True,
            ) from error
        except (TimeoutError, OSError, nats.errors.Error) as error:
            raise NatsPublishUnknown(f"{self.name}.{operation}: {error!r}") from error
        return {
            "broker": "nats",
            "stream": ack.stream,
            "seq": ack.seq,
            "duplicate": bool(ack.duplicate),
            "msg_id": call.idempotency_key,
        }


def nats_participant(
    name: str,
    url: str,
    *,
    operations: Mapping[str, Classification | str],
    deduplicates: bool,
    reply_within_seconds: float,
    stream: str | None = None,
    subject: str | None = None,
    reply_stream: str | None = None,
    reply_subject: str | None = None,
    confirm_seconds: float = CONFIRM_SECONDS_DEFAULT,
    retry: RetryPolicy | None = None,
) -> NatsParticipant:
    """Declare a participant reached through NATS JetStream, one effect per operation.

    Example::

        payments = nats_participant(
            "payments", "nats://127.0.0.1:4222",
            operations={"charge": "compensatable"},
            deduplicates=True, reply_within_seconds=30,
        )
        registry.add_participant(payments)

    Requests go to ``{subject}.{operation}`` (default subject: the name), kept by ``stream``
    (default: the name in capitals); replies come back on ``reply_subject`` (default
    ``ledgerflow.replies.{name}``), kept by ``reply_stream`` (default: the stream's name and
    ``_REPLIES``). The relay refuses to run unless
    the request stream's duplicate window covers the declared retry horizon.
    """
    what = f"nats participant {name}"
    require_extra("brokers", purpose=what)
    check_url(url, what=what, schemes=("nats://", "tls://"), example="nats://127.0.0.1:4222")
    check_operations(operations, what=what, example="'charge': 'compensatable'")
    policy = retry if retry is not None else DEFAULT_EFFECT_RETRY
    # Each attempt waits at most for its PubAck and its reply, then a back-off.
    per_attempt = confirm_seconds + reply_within_seconds + policy.backoff_max.total_seconds()
    stream = stream or name.upper().replace(".", "_").replace("-", "_")
    route = NatsRoute(
        participant=name,
        url=url,
        stream=stream,
        subject=subject or name,
        reply_stream=reply_stream or f"{stream}_REPLIES",
        reply_subject=reply_subject or f"ledgerflow.replies.{name}",
        consumer=f"ledgerflow-relay-{name}".replace(".", "-"),
        retry_horizon_seconds=policy.attempts_max * per_attempt,
    )
    participant = NatsParticipant(route, deduplicates=deduplicates, confirm_seconds=confirm_seconds)
    for operation, classification in operations.items():
        participant.effect(
            operation,
            classification=classification,
            timeout_seconds=confirm_seconds + 1.0,
            retry=policy,
            completes_by_callback=reply_within_seconds,
        )(per_operation(name, operation, participant.publish))
    return participant


async def declare_streams(
    route: NatsRoute, *, duplicate_window_seconds: float | None = None
) -> None:
    """Declare a route's streams as the relay's check expects them (for a participant team's
    set-up, the demo and tests): file storage, the request stream's duplicate window the retry
    horizon (or ``duplicate_window_seconds``), and the dead-letter stream keeping the server's
    max-deliveries advisories for the request stream."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    window = duplicate_window_seconds or route.retry_horizon_seconds
    connection = await nats.connect(route.url)
    try:
        jetstream = connection.jetstream()
        await jetstream.add_stream(
            StreamConfig(
                name=route.stream,
                subjects=[f"{route.subject}.>"],
                storage=StorageType.FILE,
                duplicate_window=window,
            )
        )
        await jetstream.add_stream(
            StreamConfig(
                name=route.reply_stream,
                subjects=[route.reply_subject],
                storage=StorageType.FILE,
            )
        )
        # The server only announces a request its consumer gave up on (a core NATS advisory,
        # lost when nobody listens): this stream keeps each announcement for the relay.
        await jetstream.add_stream(
            StreamConfig(
                name=route.dead_letter_stream,
                subjects=[route.dead_letter_subject],
                storage=StorageType.FILE,
            )
        )
    finally:
        await connection.close()
