"""``ledgerflow serve``: the HTTP API and the operator console over one journal (internal).

This module owns running :func:`ledgerflow.web.create_app` under uvicorn (the ``http`` extra:
without it the command says which extra to install). The socket is bound here, before
serving, so that ``--port 0`` has a real port to announce, and the single line
``LISTENING http://HOST:PORT`` is printed only once connections are accepted: a script or test
that reads it can send at once. SIGTERM (exit 0) and Ctrl-C stop it gracefully, which closes
the store.

Every route but ``/healthz`` and ``/readyz`` needs a token (``ledgerflow tokens create``).
``--insecure-no-auth`` turns that off, and is refused unless the address is a loopback one:
a server without authentication must not be reachable from another machine.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys

import click

from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.logs import configure_logging, log_format_option
from ledgerflow.cli.options import db_option
from ledgerflow.cli.worker import install_faults
from ledgerflow.errors import CommandLineError, ConfigurationError
from ledgerflow.extras import require_extra
from ledgerflow.runtime.metrics import Metrics


def _bind(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says TCP; without it small responses wait on Nagle's algorithm.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1 or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option(
    "--registry",
    "target",
    metavar="MODULE:OBJECT",
    help="The workflows POST /v1/instances may start (without it the server starts none).",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve without authentication (everyone is an admin of every tenant); only on a "
    "loopback address.",
)
@log_format_option
def serve(
    db: str, host: str, port: int, target: str | None, insecure_no_auth: bool, log_format: str
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /v1/openapi.json) and the operator console
    (/console) over one journal.

    Every route but /healthz and /readyz needs a token: make one with `ledgerflow tokens
    create --name NAME --role ROLE --tenant TENANT` and send it as `Authorization: Bearer
    TOKEN` (or sign in to the console with it). docs/http-api.md lists every route.
    """
    require_extra("http", purpose="ledgerflow serve")
    configure_logging(log_format)
    # Fault tests kill a server mid-request at the API's named points (web/declare.py).
    install_faults()
    if insecure_no_auth and not is_loopback(host):
        raise CommandLineError(
            f"--insecure-no-auth serves without authentication: only on a loopback address "
            f"(127.0.0.1, ::1, localhost), not {host}"
        )
    from ledgerflow.cli.http_server import serve_forever
    from ledgerflow.web import create_app

    registry = load_registry(target) if target else None
    # The process's default registry: /metrics shows what this server counted and the
    # journal's gauges.
    app = create_app(db, registry=registry, insecure_no_auth=insecure_no_auth, metrics=Metrics())
    sock = _bind(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}"

    def announce() -> None:
        click.echo(f"LISTENING {url}")
        if insecure_no_auth:
            click.echo("WARNING: no authentication: every caller is an admin", err=True)
        # Piped stdout is block-buffered; the reader waits for this line.
        sys.stdout.flush()

    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again to the handler it
    # found; with Python's default that turns a clean stop into a death by signal. SIGTERM is
    # how a supervisor asks for a normal stop, so after the graceful shutdown it is ignored and
    # the command exits 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    serve_forever(app, sock, announce)


def register(group: click.Group) -> None:
    group.add_command(serve)
