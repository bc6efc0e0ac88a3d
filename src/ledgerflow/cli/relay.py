"""``ledgerflow relay``: the broker relays of a registry, alone, without running workflows.

A participant declared over RabbitMQ or NATS JetStream has a relay that carries its replies
(and, on RabbitMQ, the requests the broker dead-lettered) into the journal, on a callback's
path, acknowledging each message only after the journal committed it. Publishing is not the
relay's: the worker that drives an instance publishes the effect's committed intent (the outbox
record) and records the confirm as ACCEPTED. ``ledgerflow worker`` runs the relays beside its
workflows unless ``--no-relay``; this command runs them in a process of their own, to be
restarted or placed apart from the workers.

Before consuming anything each relay proves what its route claims of the broker (durable quorum
queues with a dead-letter route; a NATS stream's duplicate window at least the retry horizon)
and the command refuses to start, in one line, on a broker that lies or cannot be reached.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from ledgerflow.cli.broker_relays import broker_relays, run_beside
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.logs import configure_logging, log_format_option
from ledgerflow.cli.options import db_option
from ledgerflow.cli.worker import install_faults
from ledgerflow.errors import ConfigurationError
from ledgerflow.redaction import redact
from ledgerflow.runtime.engine import Engine

log = logging.getLogger("ledgerflow.relay")


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
