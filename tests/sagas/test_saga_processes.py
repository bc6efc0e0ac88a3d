"""Sagas with real processes: every failure position, crashes during compensation, drift.

A participant service (its own process, one SQLite ledger per participant) and worker processes
over real HTTP, as in ``tests/faults``. Each test drives one instance of the trip booking
(flight, hotel, car, each booking undone by a cancel) or of the order saga (inventory reserve
undone by release, then the payment pivot, shipping undone by cancel_shipment, an email), and
checks the exact terminal state against two witnesses: the engine's ledgers and what the
participants themselves applied, in the global order in which they applied it.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from saga_workflows import FAST, ORDER, TRIP, registry

from ledgerflow import EffectRecord, EffectState, InstanceStatus, SyncEngine

pytestmark = pytest.mark.slow

TRIP_PARTICIPANTS = ("flight", "hotel", "car")
ORDER_PARTICIPANTS = ("inventory", "payment", "shipping", "email")


@pytest.fixture
def engine(workers: Any) -> Iterator[SyncEngine]:
    with SyncEngine(workers.db_url, registry) as engine:
        yield engine


def _fails_for_good(participant: str, operation: str) -> dict[str, Any]:
    return {"participant": participant, "operation": operation, "action": "reject_final"}


def _history(service: Any, participants: tuple[str, ...]) -> list[str]:
    """What the participants applied, as ``participant.operation``, in the order they did."""
    rows = [
        (row["applied_at"], f"{name}.{row['operation']}")
        for name in participants
        for row in service.ledger(name)["applied"]
    ]
    return [what for _, what in sorted(rows)]


def _originals(engine: SyncEngine, instance_id: str) -> dict[str, EffectRecord]:
    return {e.participant: e for e in engine.detail(instance_id).effects if e.seq > 0}


def _compensations(engine: SyncEngine, instance_id: str) -> dict[str, EffectRecord]:
    return {e.participant: e for e in engine.detail(instance_id).effects if e.seq < 0}


def _assert_ledgers_agree(
    service: Any, engine: SyncEngine, instance_id: str, participants: tuple[str, ...]
) -> None:
    """Every CONFIRMED effect and compensation was applied exactly once under its own key, and
    nothing else was applied; each compensation's key is ``compensate:`` + its original's."""
    effects = engine.detail(instance_id).effects
    by_id = {e.effect_id: e for e in effects}
    for compensation in (e for e in effects if e.seq < 0):
        original = by_id[compensation.compensates]
        assert original.state is EffectState.CONFIRMED, original
        assert compensation.idempotency_key == "compensate:" + original.idempotency_key
        assert compensation.seq == -original.seq
    confirmed = sorted(
        (e.participant, e.operation, e.idempotency_key)
        for e in effects
        if e.state is EffectState.CONFIRMED
    )
    applied = sorted(
        (name, row["operation"], row["key"])
        for name in participants
        for row in service.ledger(name)["applied"]
    )
    assert applied == confirmed


@pytest.mark.parametrize(
    ("failing", "status", "history"),
    [
        (None, InstanceStatus.SUCCEEDED, ["flight.book", "hotel.book", "car.book"]),
        ("flight", InstanceStatus.FAILED, []),
        ("hotel", InstanceStatus.COMPENSATED, ["flight.book", "flight.cancel"]),
        (
            "car",
            InstanceStatus.COMPENSATED,
            ["flight.book", "hotel.book", "hotel.cancel", "flight.cancel"],
        ),
    ],
)
def test_trip_each_failure_position(
    workers: Any,
    engine: SyncEngine,
    failing: str | None,
    status: InstanceStatus,
    history: list[str],
) -> None:
    """Goal: the trip saga ends in the truthful state whichever booking is refused for good.

    Method: the failing participant rejects its booking finally; a worker runs the instance to
    its end. The exact terminal state; the participants' global applied history (each booking
    applied once, each confirmed one cancelled once, in reverse order, after every booking);
    nothing received by the participants after the failing one; and the engine's ledger and the
    participants' records agree key by key.
    """
    service = workers.service
    if failing is not None:
        service.rules(_fails_for_good(failing, "book"))
    started = engine.start("trip", key=f"trip-{failing}", input=TRIP)

    workers.recover()

    record = engine.get(started.instance_id)
    assert record.status is status, record.reason
    assert _history(service, TRIP_PARTICIPANTS) == history
    if failing is not None:
        later = TRIP_PARTICIPANTS[TRIP_PARTICIPANTS.index(failing) + 1 :]
        assert all(service.ledger(name)["received"] == [] for name in later)
        failed = _originals(engine, started.instance_id)[failing]
        assert failed.state is EffectState.FAILED
        assert failing not in _compensations(engine, started.instance_id)
    _assert_ledgers_agree(service, engine, started.instance_id, TRIP_PARTICIPANTS)


@pytest.mark.parametrize(
    ("failing", "status", "history"),
    [
        ("inventory.reserve", InstanceStatus.FAILED, []),
        ("payment.charge", InstanceStatus.COMPENSATED, ["inventory.reserve", "inventory.release"]),
        (
            "shipping.ship",
            InstanceStatus.FORWARD_RECOVERY_REQUIRED,
            ["inventory.reserve", "payment.charge"],
        ),
        (
            "email.send",
            InstanceStatus.FORWARD_RECOVERY_REQUIRED,
            ["inventory.reserve", "payment.charge", "shipping.ship"],
        ),
    ],
)
def test_order_each_failure_position(
    workers: Any,
    engine: SyncEngine,
    failing: str,
    status: InstanceStatus,
    history: list[str],
) -> None:
    """Goal: the payment is the pivot: before it a failure compensates, after it nothing is.

    Method: one step of the order is rejected for good. Before the charge is confirmed the
    reservation is released (COMPENSATED); once it is confirmed, a failed shipment or email
    leaves the order FORWARD_RECOVERY_REQUIRED with nothing compensated: no refund, no
    release, no cancelled shipment, in the participants' records as in the engine's.
    """
    service = workers.service
    participant, _, operation = failing.partition(".")
    service.rules(_fails_for_good(participant, operation))
    started = engine.start("order", key=f"order-{participant}", input=ORDER)

    workers.recover()

    record = engine.get(started.instance_id)
    assert record.status is status, record.reason
    assert _history(service, ORDER_PARTICIPANTS) == history
    if status is InstanceStatus.FORWARD_RECOVERY_REQUIRED:
        assert _compensations(engine, started.instance_id) == {}
    _assert_ledgers_agree(service, engine, started.instance_id, ORDER_PARTICIPANTS)


@pytest.mark.parametrize("point", ["compensation.before_dispatch", "compensation.after_dispatch"])
@pytest.mark.parametrize(
    ("participant", "seq", "settled_by"),
    [("hotel", 2, "participant deduplicates"), ("flight", 1, "lookup: ")],
)
def test_crash_during_compensation(
    workers: Any, engine: SyncEngine, point: str, participant: str, seq: int, settled_by: str
) -> None:
    """Goal: a worker killed on either side of a compensation's dispatch never doubles it.

    Method: the car is refused for good; the worker is SIGKILLed at the named point of the
    hotel's or the flight's cancellation (the flight settles doubt by lookup, the hotel by
    deduplication). Before recovery the instance is still COMPENSATING and the cancellation
    was received zero times (before dispatch) or applied once (after). A fresh worker settles
    the doubt through the participant (lookup or same key again) and finishes: COMPENSATED,
    every compensation applied exactly once, in reverse order; the cancellation the participant
    applied is attempt 2 when the first was never sent, attempt 1 when it was.
    """
    service = workers.service
    service.rules(_fails_for_good("car", "book"))
    started = engine.start("trip", key=f"crash-{participant}-{point}", input=TRIP)
    where = {
        "instance": started.instance.business_key,
        "seq": seq,
        "operation": f"{participant}.cancel",
    }

    workers.killed_at([{"point": point, "action": "kill", "match": where}])

    assert engine.get(started.instance_id).status is InstanceStatus.COMPENSATING
    key = _compensations(engine, started.instance_id)[participant].idempotency_key
    sent = point == "compensation.after_dispatch"
    assert len(service.received(participant, key)) == int(sent)
    assert len(service.applied(participant, key)) == int(sent)

    workers.recover()

    assert engine.get(started.instance_id).status is InstanceStatus.COMPENSATED
    events = engine.detail(started.instance_id).timeline
    assert any(e.subject == f"effect:-{seq}" and settled_by in (e.detail or "") for e in events), [
        (e.subject, e.detail) for e in events
    ]
    [cancel] = service.applied(participant, key)
    assert cancel["attempt"] == (1 if sent else 2)
    assert _history(service, TRIP_PARTICIPANTS) == [
        "flight.book",
        "hotel.book",
        "hotel.cancel",
        "flight.cancel",
    ]
    _assert_ledgers_agree(service, engine, started.instance_id, TRIP_PARTICIPANTS)


def _fail_car_after_drift(workers: Any, engine: SyncEngine, key: str, drift: Any) -> str:
    """Run a trip until the car request is held, apply ``drift`` to the flight booking, then
    refuse the car for good and let the worker finish. Returns the instance id."""
    service = workers.service
    service.rules({"participant": "car", "operation": "book", "action": "hold"})
    started = engine.start("trip", key=key, input=TRIP)
    process = workers.spawn(until_idle=True)
    service.wait_held(1)
    [booking] = service.ledger("flight")["applied"]
    drift(booking["key"])
    service.release("reject_final")
    workers.finish(process)
    return started.instance_id


def test_compensation_already_reflected_is_not_applied(workers: Any, engine: SyncEngine) -> None:
    """Goal: a compensation whose effect someone else already undid is not applied blindly.

    Method: while the car request is held, a travel agent cancels the flight behind the
    ledger (`/_control/reverse`); then the car is refused. The hotel is cancelled; the flight's
    precondition answers satisfied, so its cancellation is never sent; the instance is
    COMPENSATED with the agent's evidence recorded on the flight's compensation.
    """
    service = workers.service
    instance_id = _fail_car_after_drift(
        workers,
        engine,
        "satisfied-1",
        lambda key: service.reverse("flight", key, by="travel-agent"),
    )

    record = engine.get(instance_id)
    assert record.status is InstanceStatus.COMPENSATED, record.reason
    undone = _compensations(engine, instance_id)
    assert undone["flight"].state is EffectState.SATISFIED
    assert json.loads(undone["flight"].evidence or "null") == {"reversed_by": "travel-agent"}
    assert service.received("flight", undone["flight"].idempotency_key) == []
    assert undone["hotel"].state is EffectState.CONFIRMED
    assert _history(service, TRIP_PARTICIPANTS) == ["flight.book", "hotel.book", "hotel.cancel"]
    _assert_ledgers_agree(service, engine, instance_id, TRIP_PARTICIPANTS)


def test_violated_precondition_goes_to_an_operator(workers: Any, engine: SyncEngine) -> None:
    """Goal: a compensation that can no longer be applied stops at an operator with the reason.

    Method: while the car request is held, the flight participant loses the booking (its row
    is deleted from the participant's own ledger file: drift behind the engine's back); then
    the car is refused. The hotel is cancelled first (reverse order); the flight's precondition
    is violated, so nothing is sent to it and the instance is MANUAL_INTERVENTION, never
    COMPENSATED, with the participant's reason.
    """
    service = workers.service

    def lose_booking(key: str) -> None:
        path = service.folder / "flight.participant.db"
        with closing(sqlite3.connect(path, timeout=10, isolation_level=None)) as db:
            db.execute("DELETE FROM applied WHERE key = ?", (key,))

    instance_id = _fail_car_after_drift(workers, engine, "violated-1", lose_booking)

    record = engine.get(instance_id)
    assert record.status is InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "compensation_precondition_violated"
    flight = _originals(engine, instance_id)["flight"]
    assert f"nothing to undo: {flight.idempotency_key} was never applied" in (record.reason or "")
    undone = _compensations(engine, instance_id)
    assert service.received("flight", undone["flight"].idempotency_key) == []
    assert undone["flight"].state is EffectState.PLANNED
    assert undone["hotel"].state is EffectState.CONFIRMED
    assert _history(service, TRIP_PARTICIPANTS) == ["hotel.book", "hotel.cancel"]


@pytest.mark.parametrize(
    ("action", "error_code", "attempts"),
    [("reject_final", "refused", 1), ("reject", "temporarily_unavailable", FAST.attempts_max)],
)
def test_compensation_that_always_fails(
    workers: Any, engine: SyncEngine, action: str, error_code: str, attempts: int
) -> None:
    """Goal: a compensation that never succeeds ends at an operator within its attempt bound.

    Method: the hotel refuses every cancellation (finally, or retryably 1000 times) and the car
    is refused for good. The hotel received the cancellation exactly once (final refusal) or
    exactly attempts_max times (retryable), applied none; the instance is
    MANUAL_INTERVENTION, never COMPENSATED, with a reason naming the compensation, the effect
    it undoes and the participant's error; the flight, earlier in the order, is left PLANNED
    for the operator; nothing was applied twice.
    """
    service = workers.service
    service.rules(
        _fails_for_good("car", "book"),
        {"participant": "hotel", "operation": "cancel", "action": action, "times": 1000},
    )
    started = engine.start("trip", key=f"always-{action}", input=TRIP)

    workers.recover()

    record = engine.get(started.instance_id)
    assert record.status is InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "compensation_failed"
    booking = _originals(engine, started.instance_id)["hotel"]
    assert f"hotel.cancel for {booking.idempotency_key}" in (record.reason or "")
    assert error_code in (record.reason or "")
    undone = _compensations(engine, started.instance_id)
    assert undone["flight"].state is EffectState.PLANNED
    cancel = undone["hotel"]
    assert cancel.state is EffectState.FAILED
    assert cancel.attempt == attempts
    assert len(service.received("hotel", cancel.idempotency_key)) == attempts <= FAST.attempts_max
    assert service.applied("hotel", cancel.idempotency_key) == []
    _assert_ledgers_agree(service, engine, started.instance_id, TRIP_PARTICIPANTS)
