"""uvicorn around the HTTP app, announcing when it listens (internal; needs ``ledgerflow[http]``).

Imported only by ``ledgerflow serve`` once the extra is known to be installed, so the rest of
the ``ledgerflow`` command never needs uvicorn. Connections are held by
:mod:`ledgerflow.web.connections`' protocol, with its bounds.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from ledgerflow import limits
from ledgerflow.web import ConnectionBounds, protocol_class

# Long enough for an in-flight delivery (one short transaction) to finish, short enough that a
# stuck client cannot hold a deploy.
GRACEFUL_SHUTDOWN_SECONDS = 5


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, sock: socket.socket, on_listening: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._sock = sock
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # asyncio accepts as many connections per wake-up as the backlog it listens with,
        # and the budget of descriptors keeps that small; the kernel's queue of connections
        # waiting to be accepted is set large again here, so that a burst of connections
        # waits there (costing this process nothing) instead of being refused.
        self._sock.listen(limits.HTTP_LISTEN_QUEUE)
        if not self.should_exit:
            self._on_listening()


def serve_forever(
    app: Any,
    sock: socket.socket,
    on_listening: Callable[[], None],
    *,
    bounds: ConnectionBounds,
    forwarded_allow_ips: str,
) -> None:
    """Serve ``app`` on the bound ``sock`` until SIGTERM or Ctrl-C; ``on_listening`` is called
    once connections are accepted. ``forwarded_allow_ips``: the proxies whose
    ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed (comma-separated, ``*``: any,
    empty: none)."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        # Its lines go through the process's own handler (--log-format), not a format of its own.
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        http=protocol_class(bounds),
        backlog=bounds.accepts_per_wake,
        timeout_keep_alive=limits.HTTP_KEEP_ALIVE_SECONDS,
        # Given always, so that uvicorn's FORWARDED_ALLOW_IPS variable decides nothing unseen.
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
    )
    asyncio.run(_Server(config, sock, on_listening).serve(sockets=[sock]))
