"""The broker tests' order workflow: one charge, published to RabbitMQ (the route's names come
from the environment, so a worker process and the test agree on them)."""

from __future__ import annotations

import os
from datetime import timedelta

import ledgerflow as lf
from ledgerflow.participant import rabbitmq_participant

URL = os.environ.get("LEDGERFLOW_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
SUFFIX = os.environ.get("LF_TEST_ROUTE", "default")


def build(
    *,
    suffix: str = SUFFIX,
    deduplicates: bool = True,
    reply_within_seconds: float = 8.0,
    delivery_limit: int = 20,
) -> tuple[lf.Registry, lf.participant.RabbitMQParticipant]:
    registry = lf.Registry()
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
    registry.add_participant(payments)
    charge = payments.effects["charge"]

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, order: dict) -> dict:
        receipt = await ctx.effect(charge, {"amount": order["amount"], "order": order["name"]})
        return {"receipt": receipt}

    return registry, payments


registry, payments = build(
    deduplicates=os.environ.get("LF_TEST_DEDUPLICATES", "1") == "1",
    reply_within_seconds=float(os.environ.get("LF_TEST_REPLY_SECONDS", "8")),
)
