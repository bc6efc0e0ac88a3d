"""Every terminal state keeps the failure that led to it, and every failed attempt keeps its
error: nothing an operator needs is overwritten by what happened next.

A transfer withdraws (confirmed at the bank's own record), then its body raises; the instance
compensates. The COMPENSATED instance, the caller's ``WorkflowError`` and a parked compensation
all still name the original error. Retried steps and effects keep each attempt's error.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import ledgerflow as lf
from ledgerflow.cli.main import cli
from ledgerflow.errors import EffectRejectedError, WorkflowError
from ledgerflow.model.attempts import attempt_errors

QUICK = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=1))


class Bank:
    def __init__(self, *, refunds_fail: bool = False) -> None:
        self.applied: Counter[str] = Counter()
        self.refunds_fail = refunds_fail
        self.registry = lf.Registry()
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.effect(classification="compensatable", compensation="refund", retry=QUICK)
        async def withdraw(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"withdrawn": call.payload}

        @bank.compensation("refund", retry=QUICK)
        async def refund(call: lf.EffectCall) -> dict[str, Any]:
            if self.refunds_fail:
                raise EffectRejectedError("account closed", retryable=False)
            self.applied[call.idempotency_key] += 1
            return {"refunded": call.original_key}

        # The deposit's failure is the transfer's declared business failure: it compensates.
        @self.registry.workflow(name="transfer", version=1, business_failures=(RuntimeError,))
        async def transfer(ctx: lf.WorkflowContext, amount: int) -> str:
            await ctx.effect(withdraw, amount)
            raise RuntimeError("deposit failed: BankUnavailable")


async def _drive(url: str, registry: lf.Registry, key: str) -> lf.InstanceRecord:
    async with lf.Engine(url, registry) as engine:
        started = await engine.start("transfer", key=key, input=10)
        await engine.worker(lease_seconds=2, poll_seconds=0.01).run(until_idle=True)
        with pytest.raises(WorkflowError) as raised:
            await engine.result(started.instance_id, timeout=10)
        record = await engine.get(started.instance_id)
        assert raised.value.cause == record.cause
        assert "deposit failed: BankUnavailable" in str(raised.value)
        return record


def test_show_names_the_cause(journal_url: str) -> None:
    """``ledgerflow show`` of a COMPENSATED transfer prints its cause."""
    bank = Bank()
    record = asyncio.run(_drive(journal_url, bank.registry, "t-3"))
    shown = CliRunner().invoke(cli, ["show", record.instance_id, "--db", journal_url])
    assert shown.exit_code == 0, shown.output
    assert "deposit failed: BankUnavailable" in shown.output


def test_a_compensated_transfer_names_the_error_that_started_it(journal_url: str) -> None:
    """Goal: COMPENSATED keeps the workflow's own error, in the record and the caller's error.

    Method: withdraw is confirmed (the bank's record shows it once), the body raises
    RuntimeError("deposit failed: BankUnavailable"); the refund runs. The instance is
    COMPENSATED, its ``cause`` and ``reason`` name the RuntimeError, and ``engine.result`` raises
    a WorkflowError whose message and ``cause`` carry it.
    """
    bank = Bank()
    record = asyncio.run(_drive(journal_url, bank.registry, "t-1"))
    assert record.status is lf.InstanceStatus.COMPENSATED
    assert record.cause == "workflow error: RuntimeError: deposit failed: BankUnavailable"
    assert (record.reason or "").startswith(f"after {record.cause}; undone: bank.refund")
    assert sorted(bank.applied.values()) == [1, 1]


def test_a_parked_compensation_still_names_the_original_error(journal_url: str) -> None:
    """Goal: when the compensation itself cannot finish, the parked instance names both: why it
    is parked (the refund) and what led to it (the deposit's error)."""
    bank = Bank(refunds_fail=True)
    record = asyncio.run(_drive(journal_url, bank.registry, "t-2"))
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "compensation_failed"
    assert record.cause == "workflow error: RuntimeError: deposit failed: BankUnavailable"


def test_each_attempt_keeps_its_error(journal_url: str) -> None:
    """Goal: a retried local step and a retried effect keep every attempt's error, not only the
    last one.

    Method: a local step fails with ValueError twice ("first", "second") and then succeeds; an
    effect is refused twice by its participant with different codes and then applied. The
    step's ``attempt_errors`` hold both errors with their attempt numbers, in order; so do the
    effect's.
    """
    failures = iter(["first", "second"])
    refusals = iter(["busy", "throttled"])
    registry = lf.Registry()
    shop = registry.add_participant(lf.Participant("shop", deduplicates=True))

    @shop.effect(classification="forward-recovery-only", retry=QUICK)
    async def notify(call: lf.EffectCall) -> str:
        code = next(refusals, None)
        if code is not None:
            raise EffectRejectedError(f"refused: {code}", error_code=code)
        return "sent"

    def flaky() -> str:
        message = next(failures, None)
        if message is not None:
            raise ValueError(message)
        return "computed"

    @registry.workflow(name="retried", version=1, step_retry=QUICK)
    async def retried(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.step("flaky", flaky)
        result: str = await ctx.effect(notify, None)
        return result

    async def main() -> lf.InstanceDetail:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start("retried", key="r")
            await engine.worker(lease_seconds=2, poll_seconds=0.01).run(until_idle=True)
            assert await engine.result(started.instance_id, timeout=10) == "sent"
            return await engine.detail(started.instance_id)

    detail = asyncio.run(main())
    [step] = [s for s in detail.steps if s.name == "flaky"]
    assert [
        (e["attempt"], e["type"], e["message"]) for e in attempt_errors(step.attempt_errors)
    ] == [
        (1, "ValueError", "first"),
        (2, "ValueError", "second"),
    ]
    [effect] = detail.effects
    kept = attempt_errors(effect.attempt_errors)
    assert [(e["attempt"], e["type"]) for e in kept] == [
        (1, "EffectRejectedError"),
        (2, "EffectRejectedError"),
    ]
    assert ["busy" in e["message"] for e in kept] == [True, False]
    assert json.loads(effect.evidence or "null") == "sent"
    shown = CliRunner().invoke(cli, ["show", detail.instance.instance_id, "--db", journal_url])
    assert shown.exit_code == 0, shown.output
    assert "failed attempts" in shown.output
    assert "ValueError: first" in shown.output
    assert "ValueError: second" in shown.output
