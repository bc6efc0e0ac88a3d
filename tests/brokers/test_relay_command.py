"""``ledgerflow relay`` as a real process beside ``ledgerflow worker --no-relay``: 20 orders
whose charge travels over RabbitMQ, the participant service in its own process keeping its own
ledger. The relay is SIGKILLed from outside mid-run, then kills itself between a reply's
journal commit and its ack; restarted, every order completes with the participant's receipt and
every charge is applied once. It stops cleanly on SIGTERM, and refuses, in one line, a broker
that does not keep what the route claims."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from broker_workflows import build

import ledgerflow as lf
from conditions import eventually
from ledgerflow.participant import declare_topology
from processes import LEDGERFLOW, child_environment

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ORDERS = 20
PROCESS_SECONDS_MAX = 60.0


def command(journal_url: str, suffix: str, *args: str, **variables: str) -> subprocess.Popen[str]:
    """``ledgerflow ARGS broker_workflows:registry --db JOURNAL`` on this test's route."""
    return subprocess.Popen(
        [*LEDGERFLOW, *args[:1], "broker_workflows:registry", "--db", journal_url, *args[1:]],
        env=child_environment(HERE, LF_TEST_ROUTE=suffix, LF_TEST_BROKER="rabbitmq", **variables),
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def running(process: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=20)


def succeeded(engine: lf.SyncEngine, ids: list[str]) -> int:
    return sum(engine.detail(i).instance.status is lf.InstanceStatus.SUCCEEDED for i in ids)


def test_the_relay_process_carries_replies_once_through_kills(
    journal_url: str, route_suffix: str, tmp_path: Path
) -> None:
    """Goal: the relays alone, in a process of their own, complete broker effects; killed
    mid-run (from outside, and between a commit and its ack) and restarted, no charge applies
    twice and no order is left behind; SIGTERM stops it with exit 0.

    Method: worker --no-relay, the demo's payments service and ``ledgerflow relay`` as real
    processes; half the orders, then SIGKILL of the relay once some completed; the other half
    started with no relay; a relay that kills itself at relay.before_ack; a last relay."""
    registry, payments = build(suffix=route_suffix)
    asyncio.run(declare_topology(payments.route, operations=("charge",)))
    ledger = tmp_path / "payments.db"
    serve = ("-m", "ledgerflow.demo.broker_payments", payments.route.url, str(ledger))
    service = subprocess.Popen(
        [sys.executable, *serve, "--request-queue", payments.route.request_queue]
    )
    worker_args = ("worker", "--no-relay", "--poll-seconds", "0.1", "--lease-seconds", "3")
    relay = ("relay",)
    with (
        lf.SyncEngine(journal_url, registry) as engine,
        running(command(journal_url, route_suffix, *worker_args)),
    ):
        try:
            ids = [
                engine.start(
                    "order", key=f"order-{n}", input={"name": f"order-{n}", "amount": n}
                ).instance_id
                for n in range(ORDERS // 2)
            ]
            with running(command(journal_url, route_suffix, *relay)) as first:
                eventually(lambda: succeeded(engine, ids) >= 3, what="the first relay's replies")
                first.send_signal(signal.SIGKILL)
                first.communicate(timeout=10)
            ids += [
                engine.start(
                    "order", key=f"order-{n}", input={"name": f"order-{n}", "amount": n}
                ).instance_id
                for n in range(ORDERS // 2, ORDERS)
            ]
            plan = json.dumps([{"point": "relay.before_ack", "action": "kill", "times": 1}])
            second = command(journal_url, route_suffix, *relay, LEDGERFLOW_FAULTS=plan)
            eventually(lambda: second.poll() is not None, what="the relay's kill before an ack")
            assert second.returncode == -signal.SIGKILL, second.communicate()[1]
            second.communicate()
            with running(command(journal_url, route_suffix, *relay)) as last:
                eventually(
                    lambda: succeeded(engine, ids) == ORDERS,
                    what="every order",
                    timeout=PROCESS_SECONDS_MAX,
                )
                last.send_signal(signal.SIGTERM)
                _, errors = last.communicate(timeout=20)
                assert last.returncode == 0, errors
            results = {i: engine.result(i, timeout=10) for i in ids}
            effects = {i: engine.detail(i).effects[0] for i in ids}
        finally:
            service.terminate()
            service.wait(timeout=10)
    with sqlite3.connect(ledger) as db:
        applied = db.execute("SELECT key, count(*), receipt FROM applications GROUP BY key")
        rows = applied.fetchall()
    assert len(rows) == ORDERS
    assert [row for row in rows if row[1] != 1] == []
    receipts = {key: json.loads(receipt) for key, _, receipt in rows}
    for i in ids:
        assert effects[i].state is lf.EffectState.CONFIRMED
        assert results[i] == {"receipt": receipts[effects[i].idempotency_key]}


def test_the_relay_refuses_a_broker_that_lies_in_one_line(
    journal_url: str, route_suffix: str
) -> None:
    """Goal: with the route's queues never declared, the relay (and a worker running relays)
    refuses to start, naming what is missing, in one line, exit 1; --no-relay is not refused.

    Method: run each against a fresh route nobody declared."""
    for args in (("relay",), ("worker", "--until-idle")):
        process = command(journal_url, route_suffix, *args)
        _, errors = process.communicate(timeout=PROCESS_SECONDS_MAX)
        assert process.returncode == 1, errors
        lines = [line for line in errors.splitlines() if line.startswith("error:")]
        assert len(lines) == 1, errors
        assert "does not exist" in lines[0]
        assert f"payments.{route_suffix}" in lines[0]
        assert "Traceback" not in errors
    quiet = command(journal_url, route_suffix, "worker", "--until-idle", "--no-relay")
    _, errors = quiet.communicate(timeout=PROCESS_SECONDS_MAX)
    assert quiet.returncode == 0, errors
