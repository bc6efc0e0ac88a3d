"""A defect is fixed by a deploy, not by compensation.

A transfer charges a card (confirmed at the bank's own record), then its code raises. When the
exception is a declared business failure the instance compensates as before (the refund is in
the bank's record). When it is anything else (a ``NameError`` in new code) it is a defect: tried
again a bounded number of times, then parked ``workflow_defect`` with the traceback and the
code fingerprint, and nothing is refunded. Fixing the code (here a helper outside the workflow
function, so the fingerprint stays the same) and resuming the instance finishes it with the
charge applied once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import RegistrationError
from ledgerflow.model.defects import DEFECT_RETRY, WORKFLOW_DEFECT
from ledgerflow.model.definition import fingerprint_of
from ledgerflow.operators.service import Authority, Operations, RepairKind, RepairRequest

QUICK = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=1))
# Three tries of a defect in all, a few milliseconds apart.
DEFECTS = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=2))


class InsufficientFunds(lf.BusinessFailure):
    pass


class Bank:
    """The participant, with its own record of what was applied per idempotency key."""

    def __init__(self) -> None:
        self.charges: Counter[str] = Counter()
        self.refunds: Counter[str] = Counter()
        self.registry = lf.Registry()
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.effect(classification="compensatable", compensation="refund", retry=QUICK)
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.charges[call.idempotency_key] += 1
            return {"charged": call.payload}

        @bank.compensation("refund", retry=QUICK)
        async def refund(call: lf.EffectCall) -> dict[str, Any]:
            self.refunds[call.original_key or ""] += 1
            return {"refunded": call.original_key}

        self.charge = charge


# The receipt formatter a deploy fixes: broken, it names something that does not exist.
RECEIPT_FIXED = False
RECEIPT_CALLS = 0


def receipt_line(amount: int) -> str:
    global RECEIPT_CALLS
    RECEIPT_CALLS += 1
    if not RECEIPT_FIXED:
        return undefined_currency_symbol + str(amount)  # type: ignore[name-defined]  # noqa: F821 - the defect under test
    return f"EUR {amount}"


def transfer_with(bank: Bank, **settings: Any) -> None:
    @bank.registry.workflow(name="transfer", version=1, defect_retry=DEFECTS, **settings)
    async def transfer(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
        await ctx.effect(bank.charge, order["amount"])
        failure = order.get("raise")
        if failure == "insufficient":
            raise InsufficientFunds("the receiving account cannot take it")
        if failure == "value":
            raise ValueError("a declared business failure")
        return receipt_line(order["amount"])


async def _run(url: str, registry: lf.Registry, order: dict[str, Any]) -> lf.InstanceRecord:
    async with lf.Engine(url, registry) as engine:
        started = await engine.start("transfer", key="t-1", input=order)
        await engine.worker(lease_seconds=2, poll_seconds=0.01).run(until_idle=True)
        return await engine.get(started.instance_id)


@pytest.fixture(autouse=True)
def broken_receipts() -> None:
    global RECEIPT_FIXED, RECEIPT_CALLS
    RECEIPT_FIXED, RECEIPT_CALLS = False, 0


def test_a_defect_after_a_confirmed_charge_parks_without_refunding(journal_url: str) -> None:
    """Goal: a NameError after a confirmed charge refunds nothing: the instance is tried again
    a bounded number of times, then parked ``workflow_defect``, naming the error, the code
    fingerprint and the traceback.

    Method: the charge is confirmed; the receipt helper raises NameError. The bank's own
    record holds one charge and no refund; the helper ran exactly ``attempts_max`` (3) times;
    the timeline holds two defect retries; the instance is MANUAL_INTERVENTION with reason
    code workflow_defect, its reason naming NameError, 3 attempts, the fingerprint and the
    traceback's line.
    """
    bank = Bank()
    transfer_with(bank)
    record = asyncio.run(_run(journal_url, bank.registry, {"amount": 10}))
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == WORKFLOW_DEFECT
    reason = record.reason or ""
    assert "NameError" in reason
    assert "undefined_currency_symbol" in reason
    assert "after 3 attempt(s)" in reason
    assert record.fingerprint in reason
    assert "Traceback (most recent call last)" in reason
    assert "receipt_line" in reason
    assert list(bank.charges.values()) == [1]
    assert not bank.refunds
    assert DEFECTS.attempts_max == RECEIPT_CALLS
    with Operations(journal_url) as ops:
        detail = ops.detail(record.instance_id)
    retries = [e for e in detail.timeline if e.subject == "instance" and e.detail == DEFECT_RETRY]
    assert len(retries) == DEFECTS.attempts_max - 1
    assert [e.state for e in detail.effects] == [lf.EffectState.CONFIRMED]


def test_resuming_after_the_fix_finishes_with_the_charge_applied_once(
    journal_url: str, tmp_path: Any
) -> None:
    """Goal: the recipe for a defect works: fix the code, resume the parked instance (an
    audited repair), and it finishes on its pinned fingerprint without charging again.

    Method: park the transfer as above; fix the helper (the workflow function, and so the
    fingerprint, is unchanged); apply the resume repair as an operator; run a worker. The
    instance SUCCEEDED with the fixed receipt, the bank's record holds one charge under one
    key and no refund, and the audit log holds the resume.
    """
    global RECEIPT_FIXED
    bank = Bank()
    transfer_with(bank)
    parked = asyncio.run(_run(journal_url, bank.registry, {"amount": 10}))
    assert parked.reason_code == WORKFLOW_DEFECT
    RECEIPT_FIXED = True
    roles = tmp_path / "roles.toml"
    roles.write_text('[roles]\nop = ["resume"]\n[actors]\nalice = ["op"]\n')
    with Operations(journal_url, authority=Authority.from_file(roles)) as ops:
        done = ops.apply(
            RepairRequest(
                kind=RepairKind.RESUME,
                instance_id=parked.instance_id,
                actor="alice",
                reason="receipt helper fixed in release 42",
            )
        )
        assert done.outcome == "applied"
    record = asyncio.run(_run(journal_url, bank.registry, {"amount": 10}))
    assert record.instance_id == parked.instance_id
    assert record.status is lf.InstanceStatus.SUCCEEDED
    assert record.result_value == "EUR 10"
    assert list(bank.charges.values()) == [1]
    assert not bank.refunds
    with Operations(journal_url) as ops:
        audit = ops.audit()
    assert [(a.kind, a.actor, a.outcome) for a in audit if a.kind == "resume"] == [
        ("resume", "alice", "applied")
    ]


def test_a_transient_defect_heals_without_a_park(journal_url: str) -> None:
    """Goal: a defect that goes away on its own (a transient bug) is tried again and the
    instance finishes: no park, no refund.

    Method: the helper raises NameError on its first call only (the "fix" lands between the
    first and second try). The instance SUCCEEDED after one defect retry; one charge.
    """
    global RECEIPT_FIXED
    bank = Bank()
    transfer_with(bank)

    @bank.registry.workflow(name="heal", version=1, defect_retry=DEFECTS)
    async def heal(ctx: lf.WorkflowContext, amount: int) -> str:
        global RECEIPT_FIXED
        await ctx.effect(bank.charge, amount)
        try:
            return receipt_line(amount)
        finally:
            RECEIPT_FIXED = True

    async def run() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, bank.registry) as engine:
            started = await engine.start("heal", key="h-1", input=5)
            await engine.worker(lease_seconds=2, poll_seconds=0.01).run(until_idle=True)
            return await engine.get(started.instance_id)

    record = asyncio.run(run())
    assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
    assert RECEIPT_CALLS == 2
    assert list(bank.charges.values()) == [1]
    assert not bank.refunds


@pytest.mark.parametrize(
    ("settings", "order", "cause"),
    [
        ({}, {"amount": 10, "raise": "insufficient"}, "InsufficientFunds"),
        ({"business_failures": (ValueError,)}, {"amount": 10, "raise": "value"}, "ValueError"),
        ({"on_defect": "compensate"}, {"amount": 10}, "NameError"),
    ],
    ids=["business-failure-subclass", "declared-list", "on-defect-compensate"],
)
def test_a_business_failure_still_compensates(
    journal_url: str, settings: dict[str, Any], order: dict[str, Any], cause: str
) -> None:
    """Goal: what the workflow declares as its business failures compensates as before, and
    ``on_defect="compensate"`` keeps the old behaviour for every exception.

    Method: a BusinessFailure subclass; a ValueError listed in business_failures; a NameError
    under on_defect="compensate". Each ends COMPENSATED with its cause named, the bank's
    record holding one charge and one refund of it, and no defect retry on the timeline.
    """
    bank = Bank()
    transfer_with(bank, **settings)
    record = asyncio.run(_run(journal_url, bank.registry, order))
    assert record.status is lf.InstanceStatus.COMPENSATED
    assert cause in (record.cause or "")
    [key] = bank.charges
    assert bank.charges[key] == 1
    assert dict(bank.refunds) == {key: 1}
    with Operations(journal_url) as ops:
        timeline = ops.detail(record.instance_id).timeline
    assert not [e for e in timeline if e.detail == DEFECT_RETRY]


def test_declarations_enter_the_fingerprint_only_when_made() -> None:
    """Goal: declaring business failures or on_defect changes the fingerprint (it changes
    behaviour), and a workflow that declares neither keeps the fingerprint it had.

    Method: the same function registered plainly, with business_failures and with on_defect;
    three different fingerprints; the plain one is the fingerprint computed without them.
    Bad declarations are refused at registration.
    """

    async def flow(ctx: lf.WorkflowContext, x: int) -> int:
        return x

    fingerprints = []
    for settings in [{}, {"business_failures": (KeyError,)}, {"on_defect": "compensate"}]:
        registry = lf.Registry()
        registry.workflow(name="f", version=1, **settings)(flow)  # type: ignore[arg-type]
        fingerprints.append(registry.get("f").fingerprint)
    assert len(set(fingerprints)) == 3
    plain = fingerprint_of(
        flow, name="f", version=1, schema="", config={"step_retry": lf.RetryPolicy().to_record()}
    )
    assert fingerprints[0] == plain
    with pytest.raises(RegistrationError, match="on_defect"):
        lf.Registry().workflow(name="g", version=1, on_defect="ignore")
    with pytest.raises(RegistrationError, match="exception classes"):
        lf.Registry().workflow(name="g", version=1, business_failures=("KeyError",))  # type: ignore[arg-type]
