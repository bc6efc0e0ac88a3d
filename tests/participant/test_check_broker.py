"""``ledgerflow check-participant --broker`` against kit participants over real brokers.

The participant service (``broker_consumer``, the kit behind a broker consumer) runs as its
own process; the check is the command, as a participant team's CI runs it. An honest service
proves every claim its declaration makes over RabbitMQ and over NATS JetStream; one that
applies a repeat again is refuted with the requests and replies, and the command exits 3.
Needs ``LEDGERFLOW_TEST_RABBITMQ_URL`` / ``LEDGERFLOW_TEST_NATS_URL``; skipped without.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processes import LEDGERFLOW, child_environment

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
PROVEN_OVER_A_BROKER = {
    "dedupe": "proven",
    "lookup-before": "proven",
    "fence": "proven",
    "lookup-during": "proven",
    "lookup-after": "proven",
    # rabbitmq_participant and nats_participant declare no compensation.
    "compensation-key": "not claimed",
    "key-window": "proven",
}


@pytest.fixture(params=["rabbitmq", "nats"])
def broker(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(broker, its URL, the environment naming this test's route and kit), the route
    declared on the broker and deleted after."""
    variable = {"rabbitmq": "LEDGERFLOW_TEST_RABBITMQ_URL", "nats": "LEDGERFLOW_TEST_NATS_URL"}
    url = os.environ.get(variable[request.param])
    if not url:
        pytest.skip(f"broker contract checks need {variable[request.param]}")
    suffix = uuid.uuid4().hex[:10]
    tmp: Path = request.getfixturevalue("tmp_path")
    env = {"LF_CHECK_ROUTE": suffix, "LF_CHECK_KIT": str(tmp / "kit.db")}
    os.environ.update(env)  # broker_cast reads them on import, here as in the processes
    sys.path.insert(0, str(HERE))
    try:
        import importlib

        import broker_cast

        cast = importlib.reload(broker_cast)
        asyncio.run(_declare(request.param, cast))
        yield request.param, url, env
        asyncio.run(_delete(request.param, cast))
    finally:
        sys.path.remove(str(HERE))
        for name in env:
            os.environ.pop(name, None)


async def _declare(broker: str, cast: Any) -> None:
    from ledgerflow.participant import declare_streams, declare_topology

    if broker == "nats":
        await declare_streams(cast.pay_nats.route)
    else:
        await declare_topology(cast.pay_rabbit.route, operations=("charge",))


async def _delete(broker: str, cast: Any) -> None:
    if broker == "nats":
        import nats
        import nats.js.errors

        connection = await nats.connect(cast.pay_nats.route.url)
        for stream in (cast.pay_nats.route.stream, cast.pay_nats.route.reply_stream):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await connection.jetstream().delete_stream(stream)
        await connection.close()
        return
    import aio_pika

    route = cast.pay_rabbit.route
    connection = await aio_pika.connect(route.url)
    async with connection:
        channel = await connection.channel()
        for queue in route.queues():
            await channel.queue_delete(queue)
        for exchange in (route.exchange, route.dead_letter_exchange):
            await channel.exchange_delete(exchange)


@contextlib.contextmanager
def consumer(broker: str, env: dict[str, str], *, twice: bool = False) -> Iterator[None]:
    command = [sys.executable, str(HERE / "broker_consumer.py"), broker]
    process = subprocess.Popen(
        [*command, *(["--twice"] if twice else [])], env=child_environment(HERE, **env)
    )
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


def check(broker: str, url: str, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    name = "pay_nats" if broker == "nats" else "pay_rabbit"
    done = subprocess.run(
        [
            *LEDGERFLOW,
            *("check-participant", "broker_cast:registry", name, "--broker", url),
            *("--json", "--timeout", "10", "--payload", '{"amount": 5}'),
        ],
        env=child_environment(HERE, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {claim["claim"]: claim["status"] for claim in report["claims"]}


def test_an_honest_kit_participant_over_a_broker_proves_every_claim(
    broker: tuple[str, str, dict[str, str]],
) -> None:
    """Goal: the kit behind a broker consumer keeps every promise its declaration makes, and
    the check says so from the replies that came back over the broker.

    Method: the kit consumer in its own process; the check as a command; the kit's own
    ledger read after.
    """
    name, url, env = broker
    with consumer(name, env):
        code, report = check(name, url, env)
    assert code == 0, json.dumps(report, indent=1)
    assert statuses(report) == PROVEN_OVER_A_BROKER
    dedupe = next(c for c in report["claims"] if c["claim"] == "dedupe")
    first, again = dedupe["evidence"]
    assert "PUBLISH" in first["request"]
    assert first["answer"]["applied"] is True
    assert again["answer"]["duplicate"] is True
    assert again["answer"]["evidence"] == first["answer"]["evidence"]
    with sqlite3.connect(env["LF_CHECK_KIT"]) as db:
        keys = [key for (key,) in db.execute("SELECT key FROM charges")]
    # One charge per key the replies say was first applied: the repeat and a fenced original
    # applied none (whether the lookups "during" fenced the apply is the race's to decide).
    first_applied = {
        exchange["request"]["body"]["key"]
        for claim in report["claims"]
        for exchange in claim["evidence"]
        if exchange["what"] == "apply"
        and isinstance(exchange["answer"], dict)
        and exchange["answer"].get("duplicate") is False
    }
    assert sorted(keys) == sorted(first_applied)
    assert {f"{report['run']}-dedupe", f"{report['run']}-fence"} <= first_applied


def test_a_broker_participant_that_applies_a_repeat_again_is_refuted(
    broker: tuple[str, str, dict[str, str]],
) -> None:
    """Goal: a consumer that claims dedupe yet applies each delivery anew is caught, with the
    two replies' different receipts as evidence, and the command exits 3.

    Method: the same consumer in ``--twice`` mode (each delivery applied under a key of its own).
    """
    name, url, env = broker
    with consumer(name, env, twice=True):
        code, report = check(name, url, env)
    assert code == 3
    dedupe = next(c for c in report["claims"] if c["claim"] == "dedupe")
    assert dedupe["status"] == "refuted"
    first, again = dedupe["evidence"]
    assert first["answer"]["evidence"] != again["answer"]["evidence"]
    with sqlite3.connect(env["LF_CHECK_KIT"]) as db:
        (charges,) = db.execute(
            "SELECT count(*) FROM charges WHERE key LIKE ?", (f"{report['run']}-dedupe~%",)
        ).fetchone()
    assert charges == 2


WRONG_ASKS = [
    ("broker_cast:registry", ("pay_rabbit", "--broker", "nats://127.0.0.1:4222"), "RabbitMQ"),
    ("broker_cast:registry", ("pay_nats", "--broker", "amqp://x@127.0.0.1/"), "NATS"),
    ("broker_cast:registry", ("pay_rabbit", "--broker", "amqp://h/", "--url", "http://h"), "both"),
    ("check_cast:registry", ("pay", "--broker", "amqp://guest:guest@h/"), "not declared over a"),
]


@pytest.mark.parametrize(("target", "args", "said"), WRONG_ASKS)
def test_a_broker_check_asked_wrongly_is_one_line_and_exit_2(
    target: str, args: tuple[str, ...], said: str
) -> None:
    """Goal: a --broker URL of another broker than the declared one, --url with --broker, and
    --broker for a participant declared over HTTP are bad usage: one line, exit 2, nothing sent.

    Method: the command with each; no broker is needed, as nothing is published."""
    done = subprocess.run(
        [*LEDGERFLOW, "check-participant", target, *args],
        env=child_environment(HERE, LF_CHECK_ROUTE="unused", LF_CHECK_KIT="unused.db"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert said in done.stderr
    assert "guest:guest" not in done.stderr
