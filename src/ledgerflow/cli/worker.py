"""``ledgerflow worker``: run instances until stopped (internal)."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from ledgerflow import limits
from ledgerflow.cli.loading import db_option, load_registry
from ledgerflow.operators.reconcile import reconcile_task
from ledgerflow.runtime import faults
from ledgerflow.runtime.engine import Engine


@click.command()
@click.argument("target", metavar="MODULE:OBJECT")
@db_option
@click.option("--concurrency", default=limits.WORKER_CONCURRENCY_DEFAULT, show_default=True)
@click.option("--lease-seconds", default=limits.LEASE_SECONDS_DEFAULT, show_default=True)
@click.option("--poll-seconds", default=limits.POLL_SECONDS_DEFAULT, show_default=True)
@click.option("--until-idle", is_flag=True, help="Exit once nothing is runnable or in flight.")
@click.option(
    "--reconcile-seconds",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Reconcile with the participants every this many seconds (0: off). Every worker "
    "with it on asks the same lookups, so turn it on in one or a few workers.",
)
def worker(
    target: str,
    db: str,
    concurrency: int,
    lease_seconds: float,
    poll_seconds: float,
    until_idle: bool,
    reconcile_seconds: float,
) -> None:
    """Run the workflows of MODULE:OBJECT (a ledgerflow.Registry) from the store.

    A worker killed at any moment is replaced by starting another: it takes over every
    unfinished instance once its lease lapses and resumes it at the exact safe point.
    SIGTERM or Ctrl-C stops claiming and lets in-flight instances finish.
    """
    registry = load_registry(target)
    faults.install_from_environment()
    # Ledgerflow's own decisions at INFO; libraries (HTTP clients) only when they warn.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("ledgerflow").setLevel(logging.INFO)

    async def main() -> None:
        async with Engine(db, registry) as engine:
            runner = engine.worker(
                concurrency=concurrency, lease_seconds=lease_seconds, poll_seconds=poll_seconds
            )
            if reconcile_seconds > 0:
                runner.periodic.add(
                    reconcile_task(
                        runner.store,
                        registry,
                        clock=runner.clock,
                        interval_seconds=reconcile_seconds,
                    )
                )
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, runner.stop)
            click.echo(f"worker {runner.id} running on {engine.store.url}", err=True)
            await runner.run(until_idle=until_idle)

    asyncio.run(main())
