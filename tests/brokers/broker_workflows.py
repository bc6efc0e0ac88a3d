"""The broker tests' order workflow: one charge, published to RabbitMQ or NATS JetStream (the
broker and the route's names come from the environment, so a worker process and the test agree
on them)."""

from __future__ import annotations

import os
from datetime import timedelta

import ledgerflow as lf
from ledgerflow.participant import (
    NatsParticipant,
    RabbitMQParticipant,
    nats_participant,
    rabbitmq_participant,
)

URL = os.environ.get("LEDGERFLOW_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
NATS_URL = os.environ.get("LEDGERFLOW_TEST_NATS_URL", "nats://127.0.0.1:4222")
SUFFIX = os.environ.get("LF_TEST_ROUTE", "default")


def build(
    *,
    suffix: str = SUFFIX,
    deduplicates: bool = True,
    reply_within_seconds: float = 8.0,
    delivery_limit: int = 20,
) -> tuple[lf.Registry, RabbitMQParticipant]:
    payments = rabbitmq_participant(
        "payments",
        URL,
        operations={"charge": "compensatable"},
        deduplicates=deduplicates,
        reply_within_seconds=reply_within_seconds,
        exchange=f"payments.{suffix}",
        request_queue=f"payments.requests.{suffix}",
        reply_queue=f"ledgerflow.replies.{suffix}",
        dead_letter_exchange=f"payments.dead.{suffix}",
        dead_letter_queue=f"payments.dead.{suffix}",
        delivery_limit=delivery_limit,
        retry=lf.RetryPolicy(
            attempts_max=8,
            backoff_initial=timedelta(milliseconds=50),
            backoff_max=timedelta(milliseconds=400),
        ),
    )
    return with_order(payments), payments


def build_nats(
    *,
    suffix: str = SUFFIX,
    deduplicates: bool = True,
    reply_within_seconds: float = 8.0,
    attempts_max: int = 8,
    url: str = NATS_URL,
) -> tuple[lf.Registry, NatsParticipant]:
    payments = nats_participant(
        "payments",
        url,
        operations={"charge": "compensatable"},
        deduplicates=deduplicates,
        reply_within_seconds=reply_within_seconds,
        stream=f"PAY_{suffix}",
        subject=f"pay.{suffix}",
        reply_subject=f"ledgerflow.replies.{suffix}",
        confirm_seconds=2.0,
        retry=lf.RetryPolicy(
            attempts_max=attempts_max,
            backoff_initial=timedelta(milliseconds=50),
            backoff_max=timedelta(milliseconds=400),
        ),
    )
    return with_order(payments), payments


def with_order(payments: lf.Participant) -> lf.Registry:
    """A registry of the order workflow, whose one charge goes to ``payments``."""
    registry = lf.Registry()
    registry.add_participant(payments)
    charge = payments.effects["charge"]

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, order: dict) -> dict:
        receipt = await ctx.effect(charge, {"amount": order["amount"], "order": order["name"]})
        return {"receipt": receipt}

    return registry


# What a worker process serves: the broker the test names.
BROKER = os.environ.get("LF_TEST_BROKER", "rabbitmq")
registry, payments = build_nats() if BROKER == "nats" else build()
