"""A participant over real HTTP that keeps the ``traceparent`` of every request it receives.

It speaks the remote adapter's protocol (``POST /{name}/apply``, ``GET /{name}/lookup/{key}``),
applies each key once and answers a lookup from what it applied: enough for the traces'
tests, which only need to see which span each request came from.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class Seen:
    """Every request as (method, path's last part, traceparent or None), and what applied."""

    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    applied: dict[str, dict[str, Any]] = field(default_factory=dict)


@contextmanager
def traced_participant(name: str) -> Iterator[tuple[str, Seen]]:
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            key = request["key"]
            seen.requests.append(("apply", request["operation"], self.headers.get("traceparent")))
            receipt = seen.applied.setdefault(key, {"entry": len(seen.applied) + 1})
            # The answer names its request, as the protocol asks.
            self._answer({"status": "applied", "key": key, "receipt": receipt})

        def do_GET(self) -> None:
            key = unquote(urlsplit(self.path).path.rsplit("/", 1)[1])
            seen.requests.append(("lookup", key, self.headers.get("traceparent")))
            if key in seen.applied:
                self._answer({"verdict": "applied", "key": key, "evidence": seen.applied[key]})
            else:
                self._answer({"verdict": "not-applied"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
