"""Orders whose charge travels over RabbitMQ or NATS JetStream, with real worker-and-relay
processes SIGKILLed at named points and at random, a participant service in its own process
keeping its own ledger: every charge is applied once at the participant, every order completes
with the participant's own receipt, and a publish whose confirm was never recorded is published
again under its key."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from broker_workflows import build, build_nats

import ledgerflow as lf
from conditions import eventually
from ledgerflow.participant import NatsParticipant, declare_streams, declare_topology
from processes import child_environment

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ORDERS = int(os.environ.get("LF_TEST_BROKER_ORDERS", "200"))
# Seconds one worker process may take to reach its fault point, or to drain the rest.
PROCESS_SECONDS_MAX = 60.0


@contextmanager
def participant_service(ledger: Path, payments: lf.Participant) -> Iterator[None]:
    where = (
        ["--nats-stream", payments.route.stream, "--nats-subject", payments.route.subject]
        if isinstance(payments, NatsParticipant)
        else ["--request-queue", payments.route.request_queue]
    )
    command = [sys.executable, "-m", "ledgerflow.demo.broker_payments", payments.route.url]
    service = subprocess.Popen([*command, str(ledger), *where])
    try:
        yield
    finally:
        service.terminate()
        service.wait(timeout=10)


def worker(
    journal_url: str, suffix: str, *faults: dict[str, Any], broker: str
) -> subprocess.Popen[bytes]:
    # Five workers die one after another on purpose: an instance three of them held without a
    # commit is a crash loop the scan would rightly park for a person, so its bound is raised.
    variables = {
        "LF_TEST_ROUTE": suffix,
        "LF_TEST_BROKER": broker,
        "LEDGERFLOW_DETECTION": "crash_loop_lease_expiries=10",
    }
    if faults:
        variables["LEDGERFLOW_FAULTS"] = json.dumps(list(faults))
    return subprocess.Popen(
        [sys.executable, str(HERE / "broker_worker.py"), journal_url],
        env=child_environment(HERE, **variables),
    )


def killed_itself(process: subprocess.Popen[bytes], what: str) -> None:
    """Wait for a worker to SIGKILL itself at its fault point."""
    code = eventually(lambda: process.poll() is not None, what=what, timeout=PROCESS_SECONDS_MAX)
    assert code
    assert process.returncode == -signal.SIGKILL, f"{what}: exit {process.returncode}"


def ledger_rows(ledger: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(ledger, timeout=30) as db:
        return db.execute(query).fetchall()


@pytest.mark.parametrize("broker", ["rabbitmq", "nats"])
def test_orders_over_a_broker_survive_kills_at_every_seam(
    journal_url: str, broker: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    payments: lf.Participant
    if broker == "nats":
        suffix = request.getfixturevalue("nats_suffix")
        registry, payments = build_nats(suffix=suffix)
        asyncio.run(declare_streams(payments.route))
    else:
        suffix = request.getfixturevalue("route_suffix")
        registry, payments = build(suffix=suffix)
        asyncio.run(declare_topology(payments.route, operations=("charge",)))
    spawn = functools.partial(worker, journal_url, suffix, broker=broker)
    ledger = tmp_path / "payments.db"
    names = [f"order-{n}" for n in range(ORDERS)]
    kills = 0
    began = time.monotonic()
    with lf.SyncEngine(journal_url, registry) as engine, participant_service(ledger, payments):
        started = {
            name: engine.start("order", key=name, input={"name": name, "amount": 100 + n})
            for n, name in enumerate(names)
        }
        # The publish of order-7 is confirmed; the confirm is not recorded yet.
        at_order_7 = {"instance": "order-7"}
        killed_itself(
            spawn({"point": "effect.after_dispatch", "action": "kill", "match": at_order_7}),
            "the kill between publish and confirm record",
        )
        # A reply is read and not yet committed; then one committed and not yet acknowledged.
        for point in ("relay.before_commit", "relay.before_ack"):
            killed_itself(
                spawn({"point": point, "action": "kill", "times": 1}), f"the kill at {point}"
            )
        kills += 3
        # Kills at no chosen point: whatever the worker was doing.
        chance = random.Random(int(os.environ.get("LF_TEST_SEED", "28")))
        for _ in range(2):
            process = spawn()
            time.sleep(chance.uniform(0.3, 1.5))  # a random moment, not a wait for a condition
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=10)
                kills += 1
        last = spawn()
        try:
            results = {
                name: engine.result(started[name].instance_id, timeout=PROCESS_SECONDS_MAX)
                for name in names
            }
            effects = {name: engine.detail(started[name].instance_id).effects[0] for name in names}
        finally:
            last.send_signal(signal.SIGTERM)
            last.wait(timeout=10)
    seconds = time.monotonic() - began
    applied = ledger_rows(ledger, "SELECT key, count(*), receipt FROM applications GROUP BY key")
    twice = [row for row in applied if row[1] != 1]
    receipts = {key: json.loads(receipt) for key, _, receipt in applied}
    delivered = dict(ledger_rows(ledger, "SELECT key, count(*) FROM deliveries GROUP BY key"))
    republished = [key for key, count in delivered.items() if count > 1]
    print(
        f"\n{broker} chaos: {ORDERS} orders, {kills} kills, {len(republished)} keys delivered "
        f"more than once, {len(twice)} applied twice, {seconds:.1f}s"
    )
    assert twice == []
    assert len(applied) == ORDERS
    for name in names:
        effect = effects[name]
        assert effect.state is lf.EffectState.CONFIRMED
        assert results[name] == {"receipt": receipts[effect.idempotency_key]}
    # order-7's confirm was lost with its worker: published again under the same key. RabbitMQ
    # delivered the repeat, which the participant answered with its first receipt; the NATS
    # stream dropped it as a duplicate of the message it keeps.
    assert effects["order-7"].attempt >= 2
    copies = delivered[effects["order-7"].idempotency_key]
    assert copies == 1 if broker == "nats" else copies >= 2
