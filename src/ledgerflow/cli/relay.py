"""``ledgerflow relay``: the broker relays of a registry, alone, without running workflows.

A participant declared over RabbitMQ or NATS JetStream has a relay that carries its replies
(and, on RabbitMQ, the requests the broker dead-lettered) into the journal, on a callback's
path, acknowledging each message only after the journal committed it. Publishing is not the
relay's: the worker that drives an instance publishes the effect's committed intent (the outbox
record) and records the confirm as ACCEPTED. ``ledgerflow worker`` runs the relays beside its
workflows unless ``--no-relay``; this command runs them in a process of their own, so they can
be scaled, restarted or placed apart from the workers.

Before consuming anything each relay proves what its route claims of the broker (durable quorum
queues with a dead-letter route; a NATS stream's duplicate window at least the retry horizon)
and the command refuses to start, in one line, on a broker that lies or cannot be reached.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import click

from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.logs import configure_logging, log_format_option
from ledgerflow.cli.options import db_option
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


def register(group: click.Group) -> None:
    @group.command("relay")
    @click.argument("target", metavar="MODULE:OBJECT")
    @db_option
    @log_format_option
    def relay_command(target: str, db: str, log_format: str) -> None:
        """Run only the broker relays of MODULE:OBJECT (a ledgerflow.Registry), no workflows.

        Each participant declared over RabbitMQ or NATS gets its relay: the participant's
        replies (and dead-lettered requests) are carried into the journal, each acknowledged
        after the commit. Workers publish the effects; run them with --no-relay beside this.
        Refuses to start, naming it, when a broker does not keep what a route claims.
        SIGTERM or Ctrl-C stops it cleanly: what it did not acknowledge is delivered again.
        """
        configure_logging(log_format)
        registry = load_registry(target)
        # Imported here: cli.worker imports this module for the relays it runs.
        from ledgerflow.cli.worker import install_faults

        install_faults()

        async def main() -> None:
            async with Engine(db, registry) as engine:
                relays = broker_relays(engine, registry)
                if not relays:
                    raise ConfigurationError(
                        f"{target} declares no participant over a broker (rabbitmq_participant "
                        "or nats_participant): there is nothing to relay"
                    )
                stopping = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, stopping.set)
                names = ", ".join(r.route.participant for r in relays)

                async def until_stopped() -> None:
                    log.info("relay running for %s on %s", names, redact(engine.store.url))
                    await stopping.wait()

                await run_beside(relays, until_stopped, stopping.set)
                log.info("relay stopped")

        asyncio.run(main())
