"""A TCP forwarder between the broker's clients and the broker, whose connections a test cuts
for real: :meth:`Cuttable.cut` aborts every connection through it (a reset on both sockets),
as a broker restart or a network partition does, and the clients connect again through it.
A shared broker cannot be restarted under the other tests, and its clients cannot be told
apart from the outside without a system account: so the test's clients go through this."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import urlsplit


class Cuttable:
    """Forwards ``127.0.0.1:<port>`` to the broker at ``url``; ``url`` is its own address."""

    def __init__(self, url: str) -> None:
        upstream = urlsplit(url)
        self.scheme = upstream.scheme
        self.host = upstream.hostname or "127.0.0.1"
        self.port = upstream.port or 4222
        self.url = ""
        self.accepted = 0
        # Each client connection: its socket and the forwarder's socket to the broker.
        self._open: set[tuple[asyncio.WriteTransport, asyncio.WriteTransport]] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Cuttable:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{self.scheme}://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()

    def cut(self) -> int:
        """Abort every client connection through the forwarder, and its broker side; how many
        client connections were cut."""
        cut = len(self._open)
        for pair in self._open:
            for transport in pair:
                transport.abort()
        self._open.clear()
        return cut

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer.transport, upstream_writer.transport)
        self._open.add(pair)
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink, pair))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        pair: tuple[asyncio.WriteTransport, asyncio.WriteTransport],
    ) -> None:
        # One side closed: close the other, and the connection is no longer open.
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()
        self._open.discard(pair)
        for transport in pair:
            transport.abort()
