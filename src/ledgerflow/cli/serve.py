"""``ledgerflow serve``: the HTTP API and the operator console over one journal (internal).

This module owns running :func:`ledgerflow.web.create_app` under uvicorn (the ``http`` extra:
without it the command says which extra to install). The socket is bound here, before
serving, so that ``--port 0`` has a real port to announce, and the single line
``LISTENING http://HOST:PORT`` is printed only once connections are accepted: a script or test
that reads it can send at once; the next line, ``CONSOLE http://HOST:PORT/console``, is where a
person points a browser. SIGTERM (exit 0) and Ctrl-C stop it gracefully, which closes
the store.

Every route but ``/healthz`` and ``/readyz`` needs a credential: a token (``ledgerflow tokens
create``), or for ``/metrics`` the scraper's secret (``--metrics-token-file``).
``--insecure-no-auth`` turns that off, and is refused unless the address is a loopback one: a
server without authentication must not be reachable from another machine, nor, through DNS
rebinding, from a web page (it answers loopback host names only). The bounds on connections
are :mod:`ledgerflow.web.connections`', the host names :mod:`ledgerflow.web.hosts`'.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
from pathlib import Path

import click

from ledgerflow import limits
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.logs import configure_logging, log_format_option
from ledgerflow.cli.options import db_option
from ledgerflow.cli.worker import install_faults
from ledgerflow.errors import CommandLineError, ConfigurationError
from ledgerflow.extras import require_extra
from ledgerflow.runtime.metrics import Metrics

# The bearer secret of /metrics, read from --metrics-token-file: at least this long.
METRICS_TOKEN_LENGTH_MIN = 16


def _bind(host: str, port: int) -> socket.socket:
    # IPv6 when the address is one (::1, ::); "localhost" and names: the first address the
    # resolver gives.
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says TCP; without it small responses wait on Nagle's algorithm.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
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


def _metrics_token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandLineError(f"--metrics-token-file {path}: cannot read it ({exc})") from None
    if len(token) < METRICS_TOKEN_LENGTH_MIN or not token.isprintable() or " " in token:
        raise CommandLineError(
            f"--metrics-token-file {path}: the secret must be one word of at least "
            f"{METRICS_TOKEN_LENGTH_MIN} printable characters (e.g. `openssl rand -hex 32`)"
        )
    return token


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


_Seconds = click.FloatRange(min=0.01, max=3600)


def _check_exposure(*, host: str, insecure_no_auth: bool, metrics: tuple[bool, str | None]) -> None:
    """Refuse what would open the server wider than its options say."""
    if insecure_no_auth and not is_loopback(host):
        raise CommandLineError(
            f"--insecure-no-auth serves without authentication: only on a loopback address "
            f"(127.0.0.1, ::1, localhost), not {host}"
        )
    metrics_open, metrics_token_file = metrics
    if metrics_open and metrics_token_file:
        raise CommandLineError("--metrics-open and --metrics-token-file: choose one")


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
    "loopback address, answering loopback host names only.",
)
@click.option(
    "--allowed-host",
    "allowed",
    multiple=True,
    metavar="NAME",
    help="A Host name the server answers (repeat for more; '*': any). Default: "
    "loopback names on a loopback --host, any otherwise.",
)
@click.option(
    "--header-timeout",
    type=_Seconds,
    default=limits.HTTP_HEADER_READ_SECONDS_DEFAULT,
    show_default=True,
    help="Seconds a request's head may take to arrive (408 after it).",
)
@click.option(
    "--body-timeout",
    type=_Seconds,
    default=limits.HTTP_BODY_READ_SECONDS_DEFAULT,
    show_default=True,
    help="Seconds a request's body may take to arrive after its head (408 after it).",
)
@click.option(
    "--connections-max",
    type=click.IntRange(1, 1_000_000),
    help=f"Connections held at once (default {limits.HTTP_CONNECTIONS_MAX_DEFAULT}, or what "
    "the descriptor limit leaves).",
)
@click.option(
    "--forwarded-allow-ips",
    default="127.0.0.1,::1",
    show_default=True,
    metavar="IPS",
    help="Proxies whose X-Forwarded-Proto/-For are believed (comma-separated; '*': any; '': none).",
)
@click.option(
    "--cookie-secure",
    is_flag=True,
    help="The console's cookies are always Secure (else only when the request came over https).",
)
@click.option(
    "--metrics-token-file",
    type=click.Path(dir_okay=False),
    help="/metrics needs this file's secret as a bearer token (Prometheus: credentials_file).",
)
@click.option("--metrics-open", is_flag=True, help="/metrics needs no credential.")
@log_format_option
def serve(
    db: str,
    host: str,
    port: int,
    target: str | None,
    insecure_no_auth: bool,
    allowed: tuple[str, ...],
    header_timeout: float,
    body_timeout: float,
    connections_max: int | None,
    forwarded_allow_ips: str,
    cookie_secure: bool,
    metrics_token_file: str | None,
    metrics_open: bool,
    log_format: str,
) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /v1/openapi.json) and the operator console
    (/console) over one journal.

    Every route but /healthz and /readyz needs a token: make one with `ledgerflow tokens
    create --name NAME --role ROLE --tenant TENANT` and send it as `Authorization: Bearer
    TOKEN` (or sign in to the console with it); /metrics takes the secret of
    --metrics-token-file instead. docs/http-api.md lists every route and bound.
    """
    require_extra("http", purpose="ledgerflow serve")
    configure_logging(log_format)
    # Fault tests kill a server mid-request at the API's named points (web/declare.py).
    install_faults()
    _check_exposure(
        host=host, insecure_no_auth=insecure_no_auth, metrics=(metrics_open, metrics_token_file)
    )
    from ledgerflow.cli.http_server import serve_forever
    from ledgerflow.web import allowed_hosts, connection_bounds, create_app

    bounds = connection_bounds(
        header_read_seconds=header_timeout,
        body_read_seconds=body_timeout,
        connections_max=connections_max,
    )
    # The process's default registry: /metrics shows what this server counted and the
    # journal's gauges.
    app = create_app(
        db,
        registry=load_registry(target) if target else None,
        insecure_no_auth=insecure_no_auth,
        metrics=Metrics(),
        allowed_hosts=allowed_hosts(allowed, listening_on=host, insecure=insecure_no_auth),
        cookie_secure=cookie_secure,
        metrics_token=_metrics_token(metrics_token_file),
        metrics_open=metrics_open,
    )
    sock = _bind(host, port)
    url = _url(host, sock.getsockname()[1])

    def announce() -> None:
        click.echo(f"LISTENING {url}")
        click.echo(f"CONSOLE {url}/console")
        if insecure_no_auth:
            click.echo("WARNING: no authentication: every caller is an admin", err=True)
        # Piped stdout is block-buffered; the reader waits for this line.
        sys.stdout.flush()

    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again to the handler it
    # found; with Python's default that turns a clean stop into a death by signal. SIGTERM is
    # how a supervisor asks for a normal stop, so after the graceful shutdown it is ignored and
    # the command exits 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    serve_forever(app, sock, announce, bounds=bounds, forwarded_allow_ips=forwarded_allow_ips)


def register(group: click.Group) -> None:
    group.add_command(serve)
