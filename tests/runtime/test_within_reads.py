"""Reads and counts of a start made inside a caller's transaction (``within``): before the
caller's COMMIT the synchronous engine's ``get`` and ``result`` answer ``NotCommittedError`` as
the asyncio engine's do, and the start is counted in the start metrics only once its commit is
proven (never for a transaction that rolled back, never twice).

Both backends (``journal_url``): the caller's own ``sqlite3`` or psycopg connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import ledgerflow as lf
from ledgerflow.errors import InstanceNotFoundError, NotCommittedError
from ledgerflow.runtime.metrics import Metrics

STARTED = "ledgerflow_instances_started_total"


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, sku: str) -> str:
        return sku

    return registry


@contextmanager
def _caller(url: str) -> Iterator[Any]:
    """The caller's own connection to the journal's database (its transaction begins at the
    first statement, as each driver does by default)."""
    if url.startswith("sqlite"):
        import sqlite3

        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            yield conn
    else:
        import psycopg

        with psycopg.connect(url.partition("?")[0]) as conn:
            yield conn


def _started(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value(STARTED, {"workflow": "order", "version": "1"}) or 0


def test_sync_get_and_result_say_not_committed_before_the_callers_commit(journal_url: str) -> None:
    """Goal: ``SyncEngine.get`` and ``result`` of an instance a caller's open transaction
    started raise NotCommittedError (``open``; ``rolled-back`` once it rolled back), not
    "not found"; another engine, which never wrote in it, says not found; after a commit the
    record is there and the start is counted once.

    Method: start through ``within`` on the caller's connection, read through the same engine
    and through a second one; roll back; start again in a new transaction and commit.
    """
    metrics = Metrics(CollectorRegistry())
    with (
        lf.SyncEngine(journal_url, _registry(), metrics=metrics) as engine,
        # Another process's view, opened (its journal checked) before the caller writes.
        lf.SyncEngine(journal_url, _registry()) as elsewhere,
        _caller(journal_url) as conn,
    ):
        elsewhere.list()
        tx = engine.within(conn, actor="service:orders")
        started = tx.start("order", key="o-1", input="A1")
        assert started.created
        with pytest.raises(NotCommittedError) as refused:
            engine.get(started.instance_id)
        assert refused.value.state == "open"
        with pytest.raises(NotCommittedError):
            engine.result(started.instance_id, timeout=1)
        with pytest.raises(InstanceNotFoundError) as missing:
            elsewhere.get(started.instance_id)
        assert not isinstance(missing.value, NotCommittedError)
        assert _started(metrics) == 0, "a start that may still roll back is no start"
        conn.rollback()
        with pytest.raises(NotCommittedError) as refused:
            engine.get(started.instance_id)
        assert refused.value.state == "rolled-back"
        assert _started(metrics) == 0

        again = engine.within(conn, actor="service:orders")
        assert again.start("order", key="o-1", input="A1").created
        conn.commit()
        assert engine.get(started.instance_id).business_key == "o-1"
        again.committed()
        again.committed()
        assert _started(metrics) == 1


def test_an_async_within_start_is_counted_once_its_commit_is_proven(journal_url: str) -> None:
    """Goal: ``Engine.within``: the start is counted when ``committed()`` proves the commit,
    once however often it is proven, and a found-again key is not counted.

    Method: start inside the caller's transaction (0 counted), commit, prove twice (1); a
    second transaction starting the same key finds it (still 1).
    """
    metrics = Metrics(CollectorRegistry())

    async def main() -> None:
        async with lf.Engine(journal_url, _registry(), metrics=metrics) as engine:
            await engine.list()  # the journal exists before the caller connects
            with _caller(journal_url) as conn:
                tx = engine.within(conn)
                await tx.start("order", key="o-2", input="B")
                assert _started(metrics) == 0
                conn.commit()
                await tx.committed()
                await tx.committed()
                assert _started(metrics) == 1
                found = engine.within(conn)
                assert not (await found.start("order", key="o-2", input="B")).created
                conn.commit()
                await found.committed()
                assert _started(metrics) == 1

    asyncio.run(main())
