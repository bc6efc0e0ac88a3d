"""``ledgerflow worker``: run instances until stopped (internal)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import click
from prometheus_client import start_http_server

from ledgerflow import limits
from ledgerflow.cli.broker_relays import broker_relays, run_beside
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.logs import configure_logging, log_format_option
from ledgerflow.cli.options import db_option
from ledgerflow.cli.supervisor import Supervisor
from ledgerflow.errors import ConfigurationError
from ledgerflow.model.definition import Registry
from ledgerflow.operators.async_service import AsyncOperations
from ledgerflow.redaction import redact
from ledgerflow.runtime import faults
from ledgerflow.runtime.engine import Engine
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.runtime.periodic import PeriodicTask
from ledgerflow.runtime.sync_engine import SyncEngine

log = logging.getLogger("ledgerflow.worker")


def serve_metrics(host: str, port: int, *, signals_seconds: float) -> Metrics:
    """The process's metrics, served on ``host:port`` (one line says where, for scripts)."""
    metrics = Metrics(signals_seconds=signals_seconds)
    try:
        server, _ = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None
    # A line a script can read for the port (--metrics-port 0), in either log format.
    log.info("METRICS http://%s:%d/metrics", host, server.server_port)
    return metrics


def environment_fault_plan() -> faults.FaultPlan | None:
    """The fault plan of ``LEDGERFLOW_FAULTS`` (fault tests), None without one, or a clear
    error if it is not one."""
    text = os.environ.get(faults.ENVIRONMENT_VARIABLE)
    if not text:
        return None
    try:
        return faults.FaultPlan.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigurationError(
            f"{faults.ENVIRONMENT_VARIABLE} is not a fault plan (a JSON list of rules, each "
            f'{{"point": ..., "action": ...}}): {type(exc).__name__}: {exc}'
        ) from None


def install_faults() -> None:
    """Install the environment's fault plan, if any. A worker (or ``serve``) that has one
    says so loudly: it will crash or kill itself on purpose."""
    faults.install(environment_fault_plan())
    if faults.plan is not None:
        log.warning(
            "fault injection is ON (%s): this process crashes, kills or pauses itself at %d "
            "named point(s) on purpose; never set it outside a fault test",
            faults.ENVIRONMENT_VARIABLE,
            len(faults.plan.rules),
        )


@click.command()
@click.argument("target", metavar="MODULE:OBJECT")
@db_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, limits.WORKER_CONCURRENCY_MAX),
    default=limits.WORKER_CONCURRENCY_DEFAULT,
    show_default=True,
    help="Instances this worker drives at once.",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=limits.LEASE_SECONDS_MIN),
    default=limits.LEASE_SECONDS_DEFAULT,
    show_default=True,
    help="How long a claim holds without a heartbeat; after a crash, other workers take the "
    "instances over once it lapses.",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=limits.POLL_SECONDS_DEFAULT,
    show_default=True,
    help="How long an idle worker waits between looks at the store (more than 0).",
)
@click.option("--until-idle", is_flag=True, help="Exit once nothing is runnable or in flight.")
@click.option(
    "--processes",
    type=click.IntRange(1, limits.WORKER_PROCESSES_MAX),
    default=1,
    show_default=True,
    help="Worker processes to run under one supervisor, each its own event loop, store pool "
    "and worker identity (docs/performance.md); --concurrency is per process. Pays on "
    "PostgreSQL; SQLite has one writer at a time (a warning says so).",
)
@click.option(
    "--reconcile-seconds",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Reconcile with the participants every this many seconds (0: off). Every worker "
    "with it on asks the same lookups, so turn it on in one or a few workers.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port at /metrics (docs/observability.md); "
    "off by default.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port listens on.",
)
@click.option(
    "--metrics-signals-seconds",
    type=click.FloatRange(min=0.05),
    default=limits.METRICS_SIGNALS_SECONDS_DEFAULT,
    show_default=True,
    help="How often the metrics' journal gauges (parked, flagged, UNKNOWN open) are read.",
)
@click.option(
    "--tracing",
    is_flag=True,
    help="Trace instance runs, steps, effects, compensations and waits with OpenTelemetry "
    "(the otel extra), through the globally configured tracer provider.",
)
@click.option(
    "--no-relay",
    is_flag=True,
    help="Do not run the broker relays of the registry's RabbitMQ and NATS participants here "
    "(run them with `ledgerflow relay`); this worker still publishes their effects.",
)
@log_format_option
def worker(
    target: str,
    db: str,
    concurrency: int,
    lease_seconds: float,
    poll_seconds: float,
    until_idle: bool,
    processes: int,
    reconcile_seconds: float,
    metrics_port: int | None,
    metrics_host: str,
    metrics_signals_seconds: float,
    tracing: bool,
    no_relay: bool,
    log_format: str,
) -> None:
    """Run the workflows of MODULE:OBJECT (a ledgerflow.Registry) from the store.

    A worker killed at any moment is replaced by starting another: it takes over every
    unfinished instance once its lease lapses and resumes it at the exact safe point.
    SIGTERM or Ctrl-C stops claiming and lets in-flight instances finish. The worker creates
    the journal and migrates its schema on open, unless the URL says ?migrate=false.

    It claims only instances pinned to a definition MODULE:OBJECT holds (same workflow,
    version and code fingerprint), and shows itself to `ledgerflow workers` while it runs.

    Beside the workflows it runs the relay of each participant declared over RabbitMQ or NATS
    (their replies into the journal), after proving each broker keeps what its route claims:
    it refuses to start on one that does not. --no-relay leaves them to `ledgerflow relay`.
    """
    configure_logging(log_format)
    registry = load_registry(target)
    if processes > 1:
        supervise(target, registry, processes=processes, params=click.get_current_context().params)
        return
    install_faults()

    metrics = (
        None
        if metrics_port is None
        else serve_metrics(metrics_host, metrics_port, signals_seconds=metrics_signals_seconds)
    )

    async def main() -> None:
        async with Engine(db, registry, metrics=metrics, tracing=tracing) as engine:
            runner = engine.worker(
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                poll_seconds=poll_seconds,
                periodic=_reconciling(engine, registry, reconcile_seconds),
            )
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, runner.stop)
            log.info(
                "worker %s running on %s",
                runner.id,
                redact(engine.store.url),
                extra={"worker": runner.id},
            )
            relays = [] if no_relay else broker_relays(engine, registry)
            await run_beside(relays, lambda: runner.run(until_idle=until_idle), runner.stop)

    asyncio.run(main())


def _reconciling(engine: Engine, registry: Registry, interval_seconds: float) -> list[PeriodicTask]:
    """The stuck-work scan comes with every worker; reconciliation only where asked."""
    if interval_seconds <= 0:
        return []
    return [AsyncOperations(engine).reconcile_task(registry, interval_seconds=interval_seconds)]


# The ``ledgerflow`` command run by this interpreter (the package has no ``__main__``).
_LEDGERFLOW = (sys.executable, "-c", "from ledgerflow.cli.main import main; main()")
# The options a child worker process is given, as the supervisor was (``--processes`` aside).
_FLAGS = ("until_idle", "tracing")
_VALUES = (
    "concurrency",
    "lease_seconds",
    "poll_seconds",
    "reconcile_seconds",
    "metrics_host",
    "metrics_signals_seconds",
    "log_format",
)


def child_command(target: str, params: dict[str, object], *, slot: int) -> list[str]:
    """The ``ledgerflow worker`` command line of the supervisor's child ``slot`` (from 1)."""
    command = [*_LEDGERFLOW, "worker", target, "--db", str(params["db"])]
    for name in _VALUES:
        command += [f"--{name.replace('_', '-')}", str(params[name])]
    command += [f"--{name.replace('_', '-')}" for name in _FLAGS if params[name]]
    port = params["metrics_port"]
    if port is not None:
        # One port each: port, port+1, ... (0 lets each child pick its own and log it).
        assert isinstance(port, int)
        command += ["--metrics-port", str(port + slot - 1 if port else 0)]
    return command


def supervise(
    target: str, registry: Registry, *, processes: int, params: dict[str, object]
) -> None:
    """Run ``processes`` worker processes of ``target`` under one supervisor until stopped;
    a ConfigurationError if they keep dying at start.

    What every child would check at its start is checked here once first (the registry by
    the caller, the fault plan, the store opened and migrated): a mistake is one error from
    the supervisor, not one from each child, and the children never race to migrate a fresh
    journal. The children install the fault plan; the supervisor runs no fault point.
    """
    environment_fault_plan()
    db = str(params["db"])
    SyncEngine(db, registry).close()
    if db.startswith("sqlite"):
        # Measured (docs/performance.md): SQLite admits one writer at a time, so more processes
        # on one SQLite journal only contend for its lock. Correct (fenced as ever), not faster.
        log.warning(
            "--processes %d on SQLite: SQLite has one writer at a time, so more worker "
            "processes share its lock rather than add throughput (docs/performance.md); use "
            "PostgreSQL to scale out",
            processes,
        )
    supervisor = Supervisor(
        lambda slot: child_command(target, params, slot=slot),
        processes=processes,
        until_idle=bool(params["until_idle"]),
    )
    supervisor.install_signal_handlers()
    log.info(
        "supervisor pid %d running %d worker processes on %s", os.getpid(), processes, redact(db)
    )
    supervisor.run()
