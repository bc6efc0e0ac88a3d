"""What the in-process broker tests share: a coroutine test run on its own loop, and an engine
with its worker, its relay and the participant's consumer all running on that loop."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.participant import NatsParticipant, RabbitMQParticipant


def sync(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """A test written as a coroutine, run on its own event loop."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@asynccontextmanager
async def running(
    journal_url: str,
    participant: RabbitMQParticipant | NatsParticipant,
    registry: lf.Registry,
    *,
    consumer: Callable[[], Awaitable[None]] | None,
) -> AsyncIterator[tuple[lf.Engine, lf.RabbitMQRelay | lf.NatsRelay]]:
    """An engine, its worker, its relay (the participant's broker's) and the participant's
    consumer, all on this loop; stopped, and the participant's connection closed, after."""
    async with lf.Engine(journal_url, registry) as engine:
        relay: lf.RabbitMQRelay | lf.NatsRelay
        if isinstance(participant, NatsParticipant):
            relay = lf.NatsRelay(engine, participant.route)
        else:
            relay = lf.RabbitMQRelay(engine, participant.route)
        worker = engine.worker(poll_seconds=0.05)
        tasks = [asyncio.create_task(worker.run()), asyncio.create_task(relay.run())]
        if consumer is not None:
            tasks.append(asyncio.create_task(consumer()))
        try:
            yield engine, relay
        finally:
            worker.stop()
            relay.stop()
            if consumer is not None:
                tasks[-1].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await participant.aclose()


def applications(ledger: Path) -> dict[str, int]:
    """How many times the participant's own ledger applied each key."""
    with sqlite3.connect(ledger) as db:
        return dict(db.execute("SELECT key, count(*) FROM applications GROUP BY key").fetchall())
