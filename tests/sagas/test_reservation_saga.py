"""A workflow that reserves stock in a reservation book, and what its failure undoes.

The stock participant keeps a participant-side reservation book (its own SQLite file). The
reservation's version travels in the effect's evidence; the compensation releases exactly that
version, and its precondition reads the book, so a hold that already expired is not released
blindly (SATISFIED, with the book's state as evidence).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.demo.reservations import ReservationBook, ReservationState
from ledgerflow.errors import EffectRejectedError
from ledgerflow.participant import Precondition

QUICK = lf.RetryPolicy(attempts_max=2, backoff_initial=timedelta(milliseconds=1))


def _shop(book: ReservationBook, *, payment_refuses: bool) -> lf.Registry:
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))
    payment = registry.add_participant(lf.Participant("payment", deduplicates=True))

    async def still_held(call: lf.EffectCall) -> Precondition:
        held = book.get(call.original_key or "")
        if held is None:
            return Precondition.violated("no such reservation")
        if held.state is not ReservationState.HELD:
            return Precondition.satisfied({"state": held.state.value, "version": held.version})
        return Precondition.holds()

    @stock.compensation("release", retry=QUICK, precondition=still_held)
    async def release(call: lf.EffectCall) -> dict[str, Any]:
        version = int(call.original_evidence["version"])
        outcome = book.release(call.original_key or "", version)
        if outcome.result.value == "lost":
            raise EffectRejectedError(outcome.reason, error_code="lost", retryable=False)
        return {"state": outcome.reservation.state.value, "version": outcome.reservation.version}

    @stock.effect(classification="reversible", retry=QUICK, compensation="release")
    async def reserve(call: lf.EffectCall) -> dict[str, Any]:
        held = book.reserve(call.idempotency_key, "sku-1", int(call.payload), ttl_seconds=3600)
        return {"reservation": held.reservation_id, "version": held.version}

    @payment.effect(classification="compensatable", retry=QUICK)
    async def charge(call: lf.EffectCall) -> dict[str, Any]:
        if payment_refuses:
            raise EffectRejectedError("card declined", error_code="declined", retryable=False)
        return {"charged": call.payload}

    @registry.workflow(name="buy", version=1)
    async def buy(ctx: lf.WorkflowContext, quantity: int) -> Any:
        await ctx.effect(reserve, quantity)
        return await ctx.effect(charge, quantity * 100)

    return registry


@pytest.fixture
def book(tmp_path: Path) -> ReservationBook:
    book = ReservationBook(tmp_path / "stock.participant.db", actor="stock-service")
    book.define_resource("sku-1", capacity=10)
    return book


def _buy(url: str, registry: lf.Registry) -> lf.InstanceRecord:
    async def main() -> lf.InstanceRecord:
        async with lf.Engine(url, registry) as engine:
            started = await engine.start("buy", key="b-1", input=3)
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)
            return await engine.get(started.instance_id)

    return asyncio.run(main())


def test_declined_payment_releases_the_exact_reservation_version(
    book: ReservationBook, tmp_path: Path
) -> None:
    """The charge is declined for good: the hold is released through its own compensation,
    at the version the reserve effect recorded, and the capacity comes back."""
    record = _buy(f"sqlite:///{tmp_path}/j.db", _shop(book, payment_refuses=True))
    assert record.status is lf.InstanceStatus.COMPENSATED
    assert book.available("sku-1") == 10
    held = book.get(_key(tmp_path))
    assert held is not None
    assert held.state is ReservationState.RELEASED
    assert held.version == 2
    assert [t.to_state for t in book.history(held.reservation_id)] == ["HELD", "RELEASED"]


def test_an_expired_hold_is_not_released_blindly(book: ReservationBook, tmp_path: Path) -> None:
    """The hold expired (swept by the stock service) before the failure: the precondition sees
    it, the release is never sent, and the compensation is SATISFIED with the book's state."""
    registry = _shop(book, payment_refuses=True)
    reserve = registry.effect("stock", "reserve")
    real = reserve.function

    async def reserve_then_expire(call: lf.EffectCall) -> Any:
        receipt = await real(call)  # type: ignore[misc]
        book.expire_due(now=book.get(call.idempotency_key).expires_at)  # type: ignore[union-attr]
        return receipt

    object.__setattr__(reserve, "function", reserve_then_expire)
    record = _buy(f"sqlite:///{tmp_path}/j.db", registry)
    assert record.status is lf.InstanceStatus.COMPENSATED
    held = book.get(_key(tmp_path))
    assert held is not None
    assert held.state is ReservationState.EXPIRED
    assert [t.to_state for t in book.history(held.reservation_id)] == ["HELD", "EXPIRED"]


def _key(tmp_path: Path) -> str:
    with lf.SyncEngine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        [instance] = engine.list()
        [hold] = [e for e in engine.detail(instance.instance_id).effects if e.seq == 1]
        if hold.compensates is None and hold.operation == "reserve":
            return hold.idempotency_key
    raise AssertionError("no reserve effect")
