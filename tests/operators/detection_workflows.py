"""Workflows the detection tests run, in worker processes and in-process.

Imported by worker subprocesses as ``detection_workflows:registry``. ``poison`` kills the
worker process that runs its step (SIGKILL: no cleanup, like an out-of-memory kill or a native
crash); ``healthy`` finishes in one step; ``charge`` calls the participant service whose URL
comes from ``LEDGERFLOW_TEST_SERVICE_URL``, with a timeout long enough that a held request
stays unanswered for the whole test.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any

from ledgerflow import Participant, Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

# The bank the service hosts: it deduplicates and can be asked.
BANK = "bank:dedupe+lookup"


def _bank(registry: Registry, url: str | None = None) -> Participant:
    # A timeout long enough that a held request stays unanswered for the whole test.
    return declare(
        registry,
        BANK,
        url=url,
        operations={"charge": "compensatable"},
        retry=RetryPolicy(attempts_max=2),
        timeout_seconds=120.0,
    )


registry = Registry()
bank = _bank(registry)


def kill_this_worker() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def double(n: int) -> int:
    return 2 * n


@registry.workflow(name="healthy", version=1)
async def healthy(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.step("double", double, n))


@registry.workflow(name="poison", version=1)
async def poison(ctx: WorkflowContext, _: Any) -> None:
    await ctx.step("crash", kill_this_worker)


@registry.workflow(name="charge", version=1)
async def charge(ctx: WorkflowContext, amount: int) -> Any:
    return await ctx.effect(bank.effects["charge"], {"amount": amount})


def charge_registry(url: str) -> Registry:
    """The ``charge`` workflow against a participant service at ``url`` (in-process tests)."""
    own = Registry()
    participant = _bank(own, url)

    @own.workflow(name="charge", version=1)
    async def charge_at(ctx: WorkflowContext, amount: int) -> Any:
        return await ctx.effect(participant.effects["charge"], {"amount": amount})

    return own


# -- poison steps (in-process) -------------------------------------------------------------------

MANY = RetryPolicy(attempts_max=10, backoff_initial=timedelta(0), backoff_max=timedelta(0))
FEW = RetryPolicy(attempts_max=2, backoff_initial=timedelta(0), backoff_max=timedelta(0))
attempts: dict[str, int] = {}


def always_the_same(key: str) -> None:
    attempts[key] = attempts.get(key, 0) + 1
    raise ValueError("price list has no entry for sku X-9")


def different_each_time(key: str) -> int:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] < 6:
        raise ConnectionError(f"upstream reset on try {attempts[key]}")
    return attempts[key]


# A missing price is same_failure's declared business failure: with fewer attempts than the
# poison bound the instance ends FAILED.
@registry.workflow(name="same_failure", version=1, business_failures=(ValueError,))
async def same_failure(ctx: WorkflowContext, policy: str) -> None:
    await ctx.step(
        "price", always_the_same, ctx.business_key, retry=MANY if policy == "many" else FEW
    )


@registry.workflow(name="changing_failure", version=1)
async def changing_failure(ctx: WorkflowContext, _: Any) -> int:
    return int(await ctx.step("fetch", different_each_time, ctx.business_key, retry=MANY))
