"""The registry ``ledgerflow check-participant --broker`` is pointed at in the broker contract
tests: ``pay_rabbit`` over RabbitMQ and ``pay_nats`` over NATS JetStream, each deduplicating,
with a lookup and a week's key window. The lookup asks the participant's own kit (the SQLite
file ``LF_CHECK_KIT`` names), as a service's lookup function would; routes are suffixed by
``LF_CHECK_ROUTE`` so tests sharing a broker do not meet."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta

from ledgerflow import LookupAnswer, Registry, RetryPolicy
from ledgerflow.participant import Kit, nats_participant, rabbitmq_participant

RABBITMQ_URL = os.environ.get("LEDGERFLOW_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
NATS_URL = os.environ.get("LEDGERFLOW_TEST_NATS_URL", "nats://127.0.0.1:4222")
SUFFIX = os.environ.get("LF_CHECK_ROUTE", "default")
RETRY = RetryPolicy(attempts_max=3)
RETENTION = timedelta(days=7)

pay_rabbit = rabbitmq_participant(
    "pay_rabbit",
    RABBITMQ_URL,
    operations={"charge": "compensatable"},
    deduplicates=True,
    reply_within_seconds=5,
    exchange=f"pay_rabbit.{SUFFIX}",
    request_queue=f"pay_rabbit.requests.{SUFFIX}",
    reply_queue=f"pay_rabbit.replies.{SUFFIX}",
    dead_letter_exchange=f"pay_rabbit.dead.{SUFFIX}",
    dead_letter_queue=f"pay_rabbit.dead.{SUFFIX}",
    retry=RETRY,
)
pay_nats = nats_participant(
    "pay_nats",
    NATS_URL,
    operations={"charge": "compensatable"},
    deduplicates=True,
    reply_within_seconds=5,
    stream=f"PAYCHECK_{SUFFIX}",
    subject=f"paycheck.{SUFFIX}",
    reply_subject=f"ledgerflow.replies.paycheck.{SUFFIX}",
    retry=RETRY,
)
registry = Registry()
for participant in (pay_rabbit, pay_nats):
    participant.key_retention = RETENTION
    registry.add_participant(participant)


def kit() -> Kit[sqlite3.Connection]:
    """The participant's own kit, on the file ``LF_CHECK_KIT`` names."""
    return Kit.sqlite(os.environ["LF_CHECK_KIT"], namespace="pay", retention=RETENTION)


@pay_rabbit.lookup
def find_rabbit(key: str, attempt: int) -> LookupAnswer:
    own = kit()
    try:
        return own.lookup(key, attempt)
    finally:
        own.close()


pay_nats.lookup(find_rabbit)
