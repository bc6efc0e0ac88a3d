"""``ledgerflow serve``: the HTTP callback endpoint over one store (internal).

This module owns running :func:`ledgerflow.web.api.create_app` under uvicorn (the ``http``
extra: without it the command says which extra to install). The socket is
bound here, before serving, so that ``--port 0`` has a real port to announce, and the single
line ``LISTENING http://HOST:PORT`` is printed only once connections are accepted: a script or
test that reads it can send at once. SIGTERM (exit 0) and Ctrl-C stop it gracefully, which
closes the store.
"""

from __future__ import annotations

import signal
import socket
import sys

import click

from ledgerflow.cli.options import db_option
from ledgerflow.errors import ConfigurationError
from ledgerflow.extras import require_extra


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
def serve(db: str, host: str, port: int) -> None:
    """Serve the HTTP callback endpoint: deliver signals, callbacks and approvals, read
    instances.

    POST /instances/ID/signals/NAME and POST /workflows/W/keys/KEY/signals/NAME take
    {"event_id", "payload", "sender", "step", "run"} (or an Idempotency-Key header) and answer
    202 accepted, 200 duplicate, 409 late, 410 ended, 403 not an approver, 404 or 422.
    GET /instances/ID shows an instance with its inbox; GET /health answers when serving.
    """
    require_extra("http", purpose="ledgerflow serve")
    from ledgerflow.cli.http_server import serve_forever
    from ledgerflow.web import create_app

    app = create_app(db)
    sock = _bind(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}"

    def announce() -> None:
        click.echo(f"LISTENING {url}")
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
