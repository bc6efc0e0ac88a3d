"""The broker relays a command runs (internal): one per participant declared over RabbitMQ or
NATS JetStream, each route proven before any consumes, run beside a worker's workflows
(``ledgerflow worker``) or alone (``ledgerflow relay``, :mod:`ledgerflow.cli.relay`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ledgerflow.errors import ConfigurationError, LedgerflowError
from ledgerflow.model.definition import Registry
from ledgerflow.participant.nats import NatsParticipant
from ledgerflow.participant.rabbitmq import RabbitMQParticipant
from ledgerflow.redaction import redact
from ledgerflow.runtime.engine import Engine
from ledgerflow.runtime.nats_relay import NatsRelay
from ledgerflow.runtime.relay import RabbitMQRelay

log = logging.getLogger("ledgerflow.relay")

Relay = RabbitMQRelay | NatsRelay


def broker_relays(engine: Engine, registry: Registry) -> list[Relay]:
    """One relay per participant of ``registry`` declared over a broker, in name order."""
    relays: list[Relay] = []
    for name in sorted(registry.participants):
        participant = registry.participants[name]
        if isinstance(participant, NatsParticipant):
            relays.append(NatsRelay(engine, participant.route))
        elif isinstance(participant, RabbitMQParticipant):
            relays.append(RabbitMQRelay(engine, participant.route))
    return relays


async def checked(relays: list[Relay]) -> None:
    """Prove every relay's route before any consumes: a lie, or a broker that cannot be
    reached, is a :class:`ConfigurationError` naming it (the in-worker relay refuses alike)."""
    for relay in relays:
        try:
            await relay.check()
        except LedgerflowError:
            raise
        except Exception as error:  # noqa: BLE001 - aio-pika and nats-py raise their own trees.
            raise ConfigurationError(
                f"relay {relay.route.participant}: the broker at {redact(relay.route.url)} "
                f"cannot be checked: {type(error).__name__}: {error}"
            ) from None


async def run_beside(
    relays: list[Relay], main: Callable[[], Awaitable[None]], stop_main: Callable[[], None]
) -> None:
    """Run ``relays`` while ``main`` runs: when ``main`` returns the relays are stopped, and a
    relay that fails stops ``main`` (a worker must not run on without its replies carried)."""
    await checked(relays)
    running = [asyncio.create_task(relay.run()) for relay in relays]
    failed: list[BaseException] = []

    def on_end(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            failed.append(task.exception())  # type: ignore[arg-type]
            stop_main()

    for task in running:
        task.add_done_callback(on_end)
    try:
        await main()
    finally:
        for relay in relays:
            relay.stop()
        await asyncio.gather(*running, return_exceptions=True)
    if failed:
        raise failed[0]
