"""Fake participant services over HTTP, each keeping its own honest ledger (demo and tests).

This module owns the other side of :mod:`ledgerflow.participant.remote`: a Starlette app hosting
several named participants. Each participant records, in its own SQLite file
``<dir>/<name>.participant.db``, every request it received, every effect it applied and every key
its lookup fenced. Tests compare that record with the engine's ledger, so the record must not
flatter the engine: a participant that does not deduplicate applies a repeated key again (a
second ``applied`` row), and a fenced dispatch is refused however late it arrives.

Fencing follows the engine's lookup contract: a lookup for ``key`` at ``attempt`` N that answers
not-applied fences attempts 1..N of that key (a lookup without an attempt fences them all), so a
delayed original is refused while the engine's re-dispatch, numbered N+1, still applies.

Faults are injected deterministically through ``/_control`` endpoints instead of sleeps:
``reject`` (retryable), ``reject_final`` and ``fail`` answer without applying, ``hold`` parks a
request after it was recorded as received until ``/_control/release`` lets it apply, drops it
(the "delayed original" and "lost response" cases) or rejects it for good. A compensation's
precondition (``GET /{name}/precondition/{key}?original=K``) is violated if ``K`` was never
applied, satisfied if someone else already reversed it (``POST /_control/reverse``: the drift a
precondition exists to catch), and holds otherwise.

Drift, a participant changing under the engine, is injected the same way: ``reshape`` applies
and answers in a shape the protocol does not know, ``refuse`` answers ``400`` to a request it
used to take, ``foreign`` answers ``200`` with the receipt of another request (without
applying), and ``crash`` applies and ends the process before answering. ``--lose-keys`` starts
the service with its participants' key tables lost (see ``participant_ledger``); ``--fresh-kit``
starts its kit-based participants on a fresh kit table, which the kit's own watermark notices.

Run as a process::

    python -m ledgerflow.demo.service --dir DIR --port 0 \\
        --participant inventory:lookup --participant payment:dedupe \\
        --participant email:dedupe+lookup --participant legacy:none

It prints one line ``LISTENING http://127.0.0.1:<port>`` once it accepts connections, and writes
the same URL to ``<dir>/service.url``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ledgerflow.demo.participant_ledger import ParticipantLedger, ParticipantSpec
from ledgerflow.participant.asgi import read_lookup_query
from ledgerflow.participant.remote import IDEMPOTENCY_KEY_HEADER, read_idempotency_key_header

# What an injected action answers instead of applying; "hold" decides later, "apply" applies.
_LATER = {"status": "rejected", "error_code": "temporarily_unavailable", "retryable": True}
_ANSWERS: dict[str, tuple[int, dict[str, Any]]] = {
    "reject": (409, _LATER),
    "reject_final": (409, {"status": "rejected", "error_code": "refused", "retryable": False}),
    "fail": (500, {"status": "failed", "error": "injected failure"}),
    "drop": (503, {"status": "dropped"}),
}
_DRIFT: dict[str, tuple[int, dict[str, Any]]] = {
    "refuse": (400, {"status": "error", "error": "unknown field 'payload'"}),
    "foreign": (
        200,
        {"status": "applied", "receipt": {"key": "another-request", "effect_id": "another"}},
    ),
}
_ACTIONS = frozenset({"hold", "reject", "reject_final", "fail", "reshape", "crash", *_DRIFT})
_RELEASES = frozenset({"apply", "drop", "reject_final"})
# A long-poll on /_control/held never waits longer than this, whatever the caller asks.
_HELD_WAIT_SECONDS_MAX = 30.0
# Held requests are dropped on shutdown, so this only bounds requests stuck elsewhere.
_GRACEFUL_SHUTDOWN_SECONDS = 1
_STARTUP_WAIT_SECONDS_DEFAULT = 10.0


@dataclass(slots=True)
class _Rule:
    participant: str
    operation: str | None
    key_contains: str | None
    action: str
    remaining: int

    def matches(self, participant: str, operation: str, key: str) -> bool:
        return (
            self.remaining > 0
            and self.participant == participant
            and (self.operation is None or self.operation == operation)
            and (self.key_contains is None or self.key_contains in key)
        )


@dataclass(slots=True)
class _Held:
    released: asyncio.Event = field(default_factory=asyncio.Event)
    then: str = "drop"


class _Controls:
    """Injected faults. Touched only from the server's event loop, so it needs no lock."""

    def __init__(self) -> None:
        self.rules: list[_Rule] = []
        self.held: list[_Held] = []
        self._held_changed = asyncio.Condition()

    def take(self, participant: str, operation: str, key: str) -> str | None:
        """The action of the first live rule matching this request, spending one of its uses."""
        for rule in self.rules:
            if rule.matches(participant, operation, key):
                rule.remaining -= 1
                return rule.action
        return None

    async def hold(self) -> str:
        held = _Held()
        self.held.append(held)
        async with self._held_changed:
            self._held_changed.notify_all()
        try:
            await held.released.wait()
        finally:
            # A cancelled request (server shutdown) must not stay counted as held.
            if held in self.held:
                self.held.remove(held)
        return held.then

    def release(self, then: str) -> int:
        count = len(self.held)
        for held in self.held:
            held.then = then
            held.released.set()
        self.held.clear()
        return count

    async def wait_held(self, at_least: int, timeout_seconds: float) -> int:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_seconds), self._held_changed:
                await self._held_changed.wait_for(lambda: len(self.held) >= at_least)
        return len(self.held)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "error": message}, status_code=status)


async def _json_object(request: Request) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        body = await request.json()
        if isinstance(body, dict):
            return body
    return None


class ParticipantService:
    """The participants one service process hosts, their ledgers and the injected faults."""

    def __init__(self, directory: Path, specs: Sequence[ParticipantSpec]) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"participant names must be distinct: {names}")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.ledgers = {spec.name: ParticipantLedger(directory, spec) for spec in specs}
        self.controls = _Controls()
        self.app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/_control/rules", self._set_rules, methods=["POST"]),
                Route("/_control/release", self._release, methods=["POST"]),
                Route("/_control/held", self._held, methods=["GET"]),
                Route("/_control/reverse", self._reverse, methods=["POST"]),
                Route("/{name}/apply", self._apply, methods=["POST"]),
                Route("/{name}/lookup/{key:path}", self._lookup, methods=["GET"]),
                Route("/{name}/precondition/{key:path}", self._precondition, methods=["GET"]),
                Route("/{name}/ledger", self._ledger, methods=["GET"]),
            ]
        )

    def close(self) -> None:
        for ledger in self.ledgers.values():
            ledger.close()

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "participants": sorted(self.ledgers)})

    async def _apply(self, request: Request) -> Response:
        ledger = self.ledgers.get(request.path_params["name"])
        if ledger is None:
            return _error(404, f"no participant {request.path_params['name']!r}")
        body = await _json_object(request)
        if body is None:
            return _error(400, "body is not a JSON object")
        key, operation, attempt = body.get("key"), body.get("operation"), body.get("attempt", 0)
        if not isinstance(key, str) or not key or not isinstance(operation, str):
            return _error(400, "'key' and 'operation' must be non-empty strings")
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            return _error(400, "'attempt' must be an integer")
        original = body.get("original_key")
        if original is not None and (not isinstance(original, str) or not original):
            return _error(400, "'original_key' must be a non-empty string when given")
        header = request.headers.get(IDEMPOTENCY_KEY_HEADER)
        try:
            if header is not None and read_idempotency_key_header(header) != key:
                return _error(400, f"the {IDEMPOTENCY_KEY_HEADER} header names another key")
        except ValueError as error:
            return _error(400, str(error))
        payload = json.dumps(body.get("payload"))
        effect_id = body.get("effect_id")
        effect_id = effect_id if isinstance(effect_id, str) else None

        await asyncio.to_thread(ledger.record_received, key, operation, attempt)
        action = self.controls.take(ledger.spec.name, operation, key)
        if action == "hold":
            action = await self.controls.hold()
        if action in _ANSWERS:
            status, answer = _ANSWERS[action]
        elif action in _DRIFT:
            status, answer = _DRIFT[action]
        else:
            status, answer = await asyncio.to_thread(
                ledger.apply, key, operation, payload, attempt, original, effect_id
            )
            if action == "crash":
                # Applied and committed, then gone before a byte of the answer is sent.
                os._exit(17)
            if action == "reshape":
                answer = {"ok": True, "result": answer.get("receipt")}
        return JSONResponse(answer, status_code=status)

    async def _lookup(self, request: Request) -> Response:
        ledger = self.ledgers.get(request.path_params["name"])
        if ledger is None or not ledger.spec.lookup:
            return _error(404, f"no lookup for participant {request.path_params['name']!r}")
        key = request.path_params["key"]
        if not key:
            return _error(400, "empty key")
        read = read_lookup_query(request.query_params)
        if isinstance(read, str):
            return _error(400, read)
        attempt, sent_at = read
        answer = await asyncio.to_thread(ledger.lookup, key, attempt, sent_at=sent_at)
        return JSONResponse(answer)

    async def _precondition(self, request: Request) -> Response:
        ledger = self.ledgers.get(request.path_params["name"])
        if ledger is None:
            return _error(404, f"no participant {request.path_params['name']!r}")
        original = request.query_params.get("original")
        if not request.path_params["key"] or not original:
            return _error(400, "a compensation key and '?original=' are required")
        return JSONResponse(await asyncio.to_thread(ledger.precondition, original))

    async def _reverse(self, request: Request) -> Response:
        body = await _json_object(request) or {}
        ledger = self.ledgers.get(str(body.get("participant")))
        key, by = body.get("key"), body.get("by")
        if ledger is None or not isinstance(key, str) or not key or not isinstance(by, str):
            return _error(400, "'participant' (known), 'key' and 'by' (strings) are required")
        await asyncio.to_thread(ledger.mark_reversed, key, by)
        return JSONResponse({"reversed": key, "by": by})

    async def _ledger(self, request: Request) -> Response:
        ledger = self.ledgers.get(request.path_params["name"])
        if ledger is None:
            return _error(404, f"no participant {request.path_params['name']!r}")
        return JSONResponse(await asyncio.to_thread(ledger.snapshot))

    async def _set_rules(self, request: Request) -> Response:
        try:
            body = await request.json()
            rules = [self._parse_rule(item) for item in body]
        except (ValueError, TypeError) as error:
            return _error(400, f"rules must be a JSON list of rule objects: {error}")
        self.controls.rules = rules
        return JSONResponse({"rules": len(rules)})

    def _parse_rule(self, item: Any) -> _Rule:
        if not isinstance(item, dict):
            raise TypeError("a rule is a JSON object")
        participant = item.get("participant")
        if participant not in self.ledgers:
            raise ValueError(f"unknown participant {participant!r}")
        operation, key_contains = item.get("operation"), item.get("key_contains")
        if not isinstance(operation, str | None) or not isinstance(key_contains, str | None):
            raise TypeError("'operation' and 'key_contains' are strings or null")
        action = item.get("action")
        if action not in _ACTIONS:
            raise ValueError(f"action must be one of {sorted(_ACTIONS)}, got {action!r}")
        times = item.get("times", 1)
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise ValueError("'times' must be a positive integer")
        return _Rule(
            participant=participant,
            operation=operation,
            key_contains=key_contains,
            action=action,
            remaining=times,
        )

    async def _release(self, request: Request) -> Response:
        then = (await _json_object(request) or {}).get("then")
        if then not in _RELEASES:
            return _error(400, f"'then' must be one of {sorted(_RELEASES)}")
        return JSONResponse({"released": self.controls.release(then)})

    async def _held(self, request: Request) -> Response:
        """The number of held requests; with ``at_least=N``, first wait (bounded) for N."""
        try:
            at_least = int(request.query_params.get("at_least", "0"))
            timeout = float(request.query_params.get("timeout", "5"))
        except ValueError:
            return _error(400, "'at_least' is an integer and 'timeout' a number of seconds")
        timeout = min(max(timeout, 0.0), _HELD_WAIT_SECONDS_MAX)
        if at_least > 0:
            return JSONResponse({"held": await self.controls.wait_held(at_least, timeout)})
        return JSONResponse({"held": len(self.controls.held)})


class _Server(uvicorn.Server):
    def __init__(self, service: ParticipantService, on_listening: Callable[[], None]) -> None:
        super().__init__(
            uvicorn.Config(
                service.app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
            )
        )
        self._service = service
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            self._on_listening()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Held requests would otherwise keep the graceful shutdown waiting for its full timeout.
        self._service.controls.release("drop")
        await super().shutdown(sockets)


def _bind(host: str, port: int) -> socket.socket:
    # Binding here rather than in uvicorn gives the real port of --port 0 before serving starts.
    # The explicit IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted connections only
    # when the listening socket says TCP, and without it every response stalls ~40 ms (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _url(host: str, sock: socket.socket) -> str:
    return f"http://{host}:{sock.getsockname()[1]}"


def _write_url(directory: Path, url: str) -> None:
    # Written whole then renamed, so a reader polling for the file never sees half a URL.
    partial = directory / "service.url.partial"
    partial.write_text(url + "\n", encoding="utf-8")
    os.replace(partial, directory / "service.url")


def start_in_thread(
    directory: Path,
    specs: Sequence[ParticipantSpec],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_seconds: float = _STARTUP_WAIT_SECONDS_DEFAULT,
) -> tuple[str, Callable[[], None]]:
    """Serve the participants from a background thread; return the URL and a stop function.

    Stopping drops any held request and waits (bounded) for the thread to end.
    """
    service = ParticipantService(directory, specs)
    sock = _bind(host, port)
    url = _url(host, sock)
    listening = threading.Event()
    server = _Server(service, listening.set)

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        finally:
            service.close()
            # Also wakes the starter when serving failed before it listened.
            listening.set()

    thread = threading.Thread(target=run, name=f"participant-service {url}", daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=startup_timeout_seconds)

    if not listening.wait(startup_timeout_seconds) or not server.started:
        stop()
        raise RuntimeError(f"participant service at {url} did not start")
    _write_url(directory, url)
    return url, stop


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ledgerflow.demo.service",
        description="Serve fake participants over HTTP, each with its own SQLite ledger.",
    )
    parser.add_argument("--dir", required=True, type=Path, help="where the ledgers are kept")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--participant",
        action="append",
        required=True,
        metavar="NAME:FLAGS",
        help="FLAGS: 'dedupe', 'lookup', 'lying-lookup', 'short-window' joined by '+', or 'none'; "
        "repeatable",
    )
    parser.add_argument(
        "--lose-keys",
        action="store_true",
        help="start with every participant's key table lost (the record of applications stays)",
    )
    parser.add_argument(
        "--fresh-kit",
        action="store_true",
        help="start every kit-based participant on a fresh kit table (its keys lost, as by a "
        "restore without them; the record of applications stays): the kit says so itself",
    )
    args = parser.parse_args(argv)
    try:
        specs = [ParticipantSpec.parse(text) for text in args.participant]
        service = ParticipantService(args.dir, specs)
        for ledger in service.ledgers.values():
            if args.lose_keys:
                ledger.lose_keys()
            elif args.fresh_kit:
                ledger.fresh_kit()
    except Exception as error:  # noqa: BLE001 - any bad setting ends in a usage error.
        parser.error(str(error))
    sock = _bind(args.host, args.port)
    url = _url(args.host, sock)

    def announce() -> None:
        _write_url(args.dir, url)
        print(f"LISTENING {url}", flush=True)

    try:
        asyncio.run(_Server(service, announce).serve(sockets=[sock]))
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
