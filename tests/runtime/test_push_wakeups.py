"""Push wake-ups: a signal committed by another process wakes an idle worker long before its
poll, on both backends; a listener that cannot hear falls back to polling, said in the log
and a metric; a listening connection the server ends is reconnected."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import ledgerflow as lf
from conditions import until
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.runtime.worker import Worker
from ledgerflow.storage.postgres import LISTEN_URL_VARIABLE
from ledgerflow.storage.wake_sources import ENABLED_VARIABLE, PgListener
from postgres_schema import ENVIRONMENT_VARIABLE, postgres_url

# Far longer than any wait below: a resumption within WOKEN_SECONDS_MAX was pushed, not polled.
LONG_POLL_SECONDS = 30.0
WOKEN_SECONDS_MAX = 5.0
SIGNAL_SCRIPT = """
import sys, ledgerflow as lf
engine = lf.SyncEngine(sys.argv[1], lf.Registry())
engine.signal(sys.argv[2], "go", event_id=sys.argv[3], payload=sys.argv[3])
engine.close()
"""

registry = lf.Registry()


@registry.workflow(name="waiter", version=1)
async def waiter(ctx: lf.WorkflowContext, n: int) -> Any:
    signal = await ctx.wait_for("go")
    return signal.payload


async def probed(worker: Worker) -> bool:
    """Whether the worker's wake source pushes, once its probe has answered."""
    wakeups = worker.wakeups
    assert wakeups is not None
    await until(lambda: wakeups.probed is not None, what="the wake-up probe")
    return bool(wakeups.probed)


def signal_from_another_process(url: str, instance_id: str, event_id: str) -> None:
    """The signal commits in a process of its own: nothing in this one rings for it."""
    subprocess.run(
        [sys.executable, "-c", SIGNAL_SCRIPT, url, instance_id, event_id], check=True, timeout=60
    )


@asynccontextmanager
async def idle_worker(
    url: str, *, poll_seconds: float = LONG_POLL_SECONDS, metrics: Metrics | None = None
) -> AsyncIterator[tuple[lf.Engine, Worker]]:
    async with lf.Engine(url, registry, metrics=metrics) as engine:
        worker = engine.worker(poll_seconds=poll_seconds)
        running = asyncio.create_task(worker.run())
        try:
            yield engine, worker
        finally:
            worker.stop()
            await running


async def waiting_instance(engine: lf.Engine, key: str) -> str:
    started = await engine.start("waiter", key=key, input=0)

    async def waiting() -> bool:
        return (await engine.get(started.instance_id)).status is lf.InstanceStatus.WAITING

    await until(waiting, what=f"{key} waiting")
    return started.instance_id


async def resumed_within(engine: lf.Engine, instance_id: str, seconds: float) -> None:
    async def ended() -> bool:
        return (await engine.get(instance_id)).status is lf.InstanceStatus.SUCCEEDED

    await until(ended, what=f"{instance_id} resumed", timeout=seconds)


def test_a_signal_from_another_process_wakes_an_idle_worker(journal_url: str) -> None:
    asyncio.run(_woken(journal_url))


async def _woken(journal_url: str) -> None:
    async with idle_worker(journal_url) as (engine, worker):
        assert await probed(worker)
        for round_ in range(2):  # and again: the first wake left the watch armed
            instance_id = await waiting_instance(engine, f"w-{round_}")
            claims = worker.claims
            await asyncio.to_thread(
                signal_from_another_process, journal_url, instance_id, f"e-{round_}"
            )
            await resumed_within(engine, instance_id, WOKEN_SECONDS_MAX)
            assert worker.claims > claims


@pytest.mark.postgres
def test_a_listener_that_hears_nothing_falls_back_to_polling(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_url("push-wakeups-deaf")
    base = urllib.parse.urlsplit(os.environ[ENVIRONMENT_VARIABLE])
    elsewhere = f"{base.path.strip('/') or 'postgres'}_listen_elsewhere"
    with (
        psycopg.connect(os.environ[ENVIRONMENT_VARIABLE], autocommit=True) as conn,
        contextlib.suppress(psycopg.errors.DuplicateDatabase),
    ):
        conn.execute(f'CREATE DATABASE "{elsewhere}"')
    # A real connection that cannot hear this journal's NOTIFYs: another database's.
    monkeypatch.setenv(LISTEN_URL_VARIABLE, base._replace(path=f"/{elsewhere}").geturl())
    caplog.set_level(logging.WARNING, logger="ledgerflow.wakeups")
    asyncio.run(_deaf(url, caplog))


async def _deaf(url: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics(CollectorRegistry())
    async with idle_worker(url, poll_seconds=0.2, metrics=metrics) as (engine, worker):
        assert not await probed(worker)
        assert metrics.registry.get_sample_value("ledgerflow_worker_push_wakeups") == 0
        warned = [r for r in caplog.records if "this worker polls" in r.getMessage()]
        assert len(warned) == 1
        instance_id = await waiting_instance(engine, "deaf")
        await asyncio.to_thread(signal_from_another_process, url, instance_id, "e-deaf")
        await resumed_within(engine, instance_id, WOKEN_SECONDS_MAX)  # by its poll


@pytest.mark.postgres
def test_a_dropped_listening_connection_listens_again() -> None:
    asyncio.run(_dropped(postgres_url("push-wakeups-dropped")))


async def _dropped(url: str) -> None:
    metrics = Metrics(CollectorRegistry())
    async with idle_worker(url, metrics=metrics) as (engine, worker):
        assert await probed(worker)
        wakeups = worker.wakeups
        assert wakeups is not None
        listener = cast(PgListener, wakeups.source)
        first = listener.backend_pid
        assert first is not None
        with psycopg.connect(os.environ[ENVIRONMENT_VARIABLE]) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        await until(
            lambda: listener.backend_pid not in (None, first) and wakeups.pushing,
            what="the listener connected again",
        )
        assert metrics.registry.get_sample_value("ledgerflow_worker_push_wakeups") == 1
        instance_id = await waiting_instance(engine, "dropped")
        await asyncio.to_thread(signal_from_another_process, url, instance_id, "e-dropped")
        await resumed_within(engine, instance_id, WOKEN_SECONDS_MAX)


def test_pushes_turned_off_leave_the_worker_to_its_poll(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: LEDGERFLOW_PUSH_WAKEUPS=off (docs/operators.md) gives a worker no wake-up source
    on either backend, and a signal from another process is then taken at the next poll."""
    monkeypatch.setenv(ENABLED_VARIABLE, "off")
    asyncio.run(_off(journal_url))


async def _off(journal_url: str) -> None:
    async with idle_worker(journal_url, poll_seconds=0.2) as (engine, worker):
        assert worker.wakeups is None
        instance_id = await waiting_instance(engine, "off")
        await asyncio.to_thread(signal_from_another_process, journal_url, instance_id, "e-off")
        await resumed_within(engine, instance_id, WOKEN_SECONDS_MAX)  # by its poll
