"""A participant built with the kit, served over real HTTP by uvicorn (a test's own process).

``python kit_shop.py DATABASE`` (a SQLite path or a ``postgresql://`` conninfo) serves the
participant ``charges``, whose business writes (charge, refund) insert a row in its own
``charges`` table in the kit's transaction. It prints ``LISTENING <url>`` once it accepts
connections.

Beside the kit's routes, two controls for tests: ``POST /_control/lose`` makes the next apply
lose its response (the kit commits, the answer is swallowed and the connection held until the
client gives up: a timeout, as a real lost response is), and ``GET /_control/seen`` lists every
apply received, with its ``Idempotency-Key`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import sqlite3
import sys
from datetime import timedelta
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ledgerflow.participant import Kit, KitRequest, kit_routes

# How long a lost response holds its connection: past any client's timeout in these tests.
LOST_HOLD_SECONDS = 20.0


def charge(db: Any, request: KitRequest) -> dict[str, Any]:
    mark = "?" if isinstance(db, sqlite3.Connection) else "%s"
    cursor = db.execute(
        f"INSERT INTO charges (key, amount) VALUES ({mark}, {mark}) RETURNING id",
        (request.key, request.payload["amount"]),
    )
    return {"charge": cursor.fetchone()[0], "amount": request.payload["amount"]}


def refund(db: Any, request: KitRequest) -> dict[str, Any]:
    # A refund is a charge of the opposite sign, under the compensation's own key.
    negative = {"amount": -request.payload["amount"]}
    return charge(db, dataclasses.replace(request, payload=negative))


def open_kit(database: str) -> Kit[Any]:
    retention = timedelta(days=7)
    if database.startswith("postgresql://"):
        kit: Kit[Any] = Kit.postgres(database, namespace="charges", retention=retention)
        serial = "BIGSERIAL"
    else:
        kit = Kit.sqlite(database, namespace="charges", retention=retention)
        serial = "INTEGER"
    table = f"CREATE TABLE IF NOT EXISTS charges (id {serial} PRIMARY KEY, key TEXT, amount INT)"
    if serial == "INTEGER":
        with contextlib.closing(sqlite3.connect(database)) as db, db:
            db.execute(table)
    else:
        import psycopg

        with psycopg.connect(database, autocommit=True) as pg:
            pg.execute(table)
    return kit


class Shop:
    def __init__(self, kit: Kit[Any]) -> None:
        self.lose = 0
        self.seen: list[dict[str, Any]] = []
        routes = kit_routes("charges", kit, operations={"charge": charge, "refund": refund})
        self.kit_app = Starlette(routes=routes)
        self.controls = Starlette(
            routes=[
                Route("/_control/lose", self._lose, methods=["POST"]),
                Route("/_control/seen", self._seen, methods=["GET"]),
            ]
        )

    async def _lose(self, request: Request) -> JSONResponse:
        self.lose += 1
        return JSONResponse({"lose": self.lose})

    async def _seen(self, request: Request) -> JSONResponse:
        return JSONResponse(self.seen)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path.startswith("/_control/"):
            await self.controls(scope, receive, send)
            return
        if not path.endswith("/apply"):
            await self.kit_app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        key = headers.get(b"idempotency-key")
        self.seen.append({"idempotency_key": None if key is None else key.decode()})
        if self.lose == 0:
            await self.kit_app(scope, receive, send)
            return
        self.lose -= 1

        async def swallow(message: Message) -> None:
            return None

        await self.kit_app(scope, receive, swallow)
        # The kit committed; the caller never hears it.
        await asyncio.sleep(LOST_HOLD_SECONDS)


def main(database: str) -> None:
    shop = Shop(open_kit(database))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            print(f"LISTENING {url}", flush=True)

    config = uvicorn.Config(shop, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    asyncio.run(Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main(sys.argv[1])
