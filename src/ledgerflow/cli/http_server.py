"""uvicorn around the HTTP app, announcing when it listens (internal; needs ``ledgerflow[http]``).

Imported only by ``ledgerflow serve`` once the extra is known to be installed, so the rest of
the ``ledgerflow`` command never needs uvicorn.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import uvicorn

# Long enough for an in-flight delivery (one short transaction) to finish, short enough that a
# stuck client cannot hold a deploy.
GRACEFUL_SHUTDOWN_SECONDS = 5


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            self._on_listening()


def serve_forever(app: Any, sock: socket.socket, on_listening: Callable[[], None]) -> None:
    """Serve ``app`` on the bound ``sock`` until SIGTERM or Ctrl-C; ``on_listening`` is called
    once connections are accepted."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        # Its lines go through the process's own handler (--log-format), not a format of its own.
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    asyncio.run(_Server(config, on_listening).serve(sockets=[sock]))
