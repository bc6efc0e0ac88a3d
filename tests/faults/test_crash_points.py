"""Crash points with real processes: a worker SIGKILLed at each gap of the effect protocol.

Each test runs a worker process against a SQLite journal and a participant service in another
process over real HTTP. The worker dies by SIGKILL at a named fault point (or is killed from
outside while the participant holds the request); a fresh worker then finishes the instance.
The verdict comes from two sources: the engine's ledgers and the participant's own ledger,
which records every application of every idempotency key.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fault_workflows import registry

from ledgerflow import EffectState, InstanceStatus, SyncEngine

pytestmark = pytest.mark.slow

ORDER = {"items": [3, 4], "sku": "A-1"}


@pytest.fixture
def engine(workers: Any) -> Iterator[SyncEngine]:
    with SyncEngine(workers.db_url, registry) as engine:
        yield engine


def _killed_at(workers: Any, faults: list[dict[str, Any]]) -> None:
    process = workers.spawn(faults=faults)
    code = process.wait(timeout=30)
    assert code == -signal.SIGKILL, f"worker exited {code}, expected SIGKILL"


def _effects(engine: SyncEngine, instance_id: str) -> dict[str, Any]:
    return {f"{e.participant}.{e.operation}": e for e in engine.detail(instance_id).effects}


def _assert_each_applied_once(service: Any, engine: SyncEngine, instance_id: str) -> None:
    for effect in engine.detail(instance_id).effects:
        assert effect.state is EffectState.CONFIRMED
        assert service.applied_count(effect.participant, effect.idempotency_key) == 1, effect


def test_crash_before_dispatch_lookup_participant(workers: Any, engine: SyncEngine) -> None:
    """(a) Killed after the intent is durable, before the request is sent.

    The new worker finds the effect INTENDED with its step STARTED: it may have been sent, so it
    becomes UNKNOWN, the lookup says not applied (fencing attempt 1), and the effect is sent
    again under the same key with attempt 2. The participant applied it exactly once.
    """
    started = engine.start("order", key="a-1", input=ORDER)
    _killed_at(
        workers, [{"point": "effect.before_dispatch", "action": "kill", "match": {"seq": 2}}]
    )
    reserve = _effects(engine, started.instance_id)["inventory.reserve"]
    assert reserve.state is EffectState.INTENDED
    assert workers.service.received_count("inventory", reserve.idempotency_key) == 0

    workers.recover()

    assert engine.get(started.instance_id).status is InstanceStatus.SUCCEEDED
    after = _effects(engine, started.instance_id)["inventory.reserve"]
    assert after.idempotency_key == reserve.idempotency_key
    assert after.attempt == 2
    _assert_each_applied_once(workers.service, engine, started.instance_id)


def test_crash_after_dispatch_before_participant_applies(workers: Any, engine: SyncEngine) -> None:
    """(b) Killed while the participant holds the request; the request is then dropped.

    The worker is SIGKILLed from outside once the participant has received the request and
    before it applies it. The participant then drops it. Recovery asks the lookup (not
    applied), re-sends under the same key, and the participant applies it once.
    """
    service = workers.service
    service.rules({"participant": "inventory", "operation": "reserve", "action": "hold"})
    started = engine.start("order", key="b-1", input=ORDER)
    process = workers.spawn()
    service.wait_held(1)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    service.release("drop")
    key = _effects(engine, started.instance_id)["inventory.reserve"].idempotency_key
    assert service.received_count("inventory", key) == 1
    assert service.applied_count("inventory", key) == 0

    workers.recover()

    assert engine.get(started.instance_id).status is InstanceStatus.SUCCEEDED
    assert service.received_count("inventory", key) == 2
    _assert_each_applied_once(service, engine, started.instance_id)


@pytest.mark.parametrize(
    ("seq", "participant", "resolved_by"),
    [(2, "inventory", "lookup: applied"), (3, "payment", "participant deduplicates")],
)
def test_crash_after_apply_before_outcome_persisted(
    workers: Any, engine: SyncEngine, seq: int, participant: str, resolved_by: str
) -> None:
    """(c) Killed after the participant applied the effect, before the outcome is durable.

    The ledger still says INTENDED. With a lookup, recovery learns it was applied and confirms
    it with the participant's evidence without sending again; with deduplication, it sends the
    same key again and the participant answers with its first receipt. Either way: applied once.
    """
    started = engine.start("order", key=f"c-{participant}", input=ORDER)
    _killed_at(
        workers, [{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": seq}}]
    )
    effect = next(
        e for e in engine.detail(started.instance_id).effects if e.participant == participant
    )
    assert effect.state is EffectState.INTENDED
    assert workers.service.applied_count(participant, effect.idempotency_key) == 1

    workers.recover()

    assert engine.get(started.instance_id).status is InstanceStatus.SUCCEEDED
    details = engine.detail(started.instance_id)
    assert any(resolved_by in (e.detail or "") for e in details.timeline), [
        e.detail for e in details.timeline
    ]
    _assert_each_applied_once(workers.service, engine, started.instance_id)


def test_crash_after_apply_without_lookup_or_dedupe_parks(workers: Any, engine: SyncEngine) -> None:
    """(c) for a participant with no lookup and no deduplication: never re-sent, parked.

    Nothing can prove whether the effect happened, so the instance goes to
    MANUAL_INTERVENTION with the reason, and the participant saw the request exactly once.
    """
    started = engine.start("legacy", key="c-legacy", input={"n": 1})
    _killed_at(workers, [{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": 1}}])

    workers.recover()

    record = engine.get(started.instance_id)
    assert record.status is InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "effect_outcome_unknown"
    assert "no lookup and does not deduplicate" in (record.reason or "")
    [effect] = engine.detail(started.instance_id).effects
    assert effect.state is EffectState.UNKNOWN
    assert workers.service.received_count("legacy", effect.idempotency_key) == 1
    assert workers.service.applied_count("legacy", effect.idempotency_key) == 1


def test_crash_while_retrying(workers: Any, engine: SyncEngine) -> None:
    """(d) The participant rejects attempt 1 (proven not applied); the worker dies just
    before sending attempt 2.

    The rejection and attempt 2's intent were committed together. Recovery treats attempt 2
    as possibly sent (its step was STARTED), re-sends under the same key to the deduplicating
    participant, and the charge is applied once.
    """
    service = workers.service
    service.rules({"participant": "payment", "operation": "charge", "action": "reject"})
    started = engine.start("order", key="d-1", input=ORDER)
    _killed_at(
        workers,
        [{"point": "effect.before_dispatch", "action": "kill", "match": {"seq": 3, "attempt": 2}}],
    )
    charge = _effects(engine, started.instance_id)["payment.charge"]
    assert charge.state is EffectState.INTENDED
    assert charge.attempt == 2
    assert service.received_count("payment", charge.idempotency_key) == 1
    assert service.applied_count("payment", charge.idempotency_key) == 0

    workers.recover()

    assert engine.get(started.instance_id).status is InstanceStatus.SUCCEEDED
    after = _effects(engine, started.instance_id)["payment.charge"]
    assert after.idempotency_key == charge.idempotency_key
    _assert_each_applied_once(service, engine, started.instance_id)


def test_crash_after_retry_applied(workers: Any, engine: SyncEngine) -> None:
    """(d) The retry itself is applied, then the worker dies before recording it.

    Attempt 1 of the reservation is rejected, attempt 2 is applied, and the worker is killed
    before the outcome is durable. The lookup finds attempt 2's application: applied once.
    """
    service = workers.service
    service.rules({"participant": "inventory", "operation": "reserve", "action": "reject"})
    started = engine.start("order", key="d-2", input=ORDER)
    _killed_at(
        workers,
        [{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": 2, "attempt": 2}}],
    )

    workers.recover()

    assert engine.get(started.instance_id).status is InstanceStatus.SUCCEEDED
    _assert_each_applied_once(service, engine, started.instance_id)


def test_crash_before_dispatch_without_lookup_or_dedupe_parks(
    workers: Any, engine: SyncEngine
) -> None:
    """(a) for the participant that can neither be asked nor safely re-sent to.

    The intent was durable and the worker died before sending; from the ledger this cannot
    be told apart from a death just after sending, so the engine parks rather than guess.
    The participant never received anything.
    """
    started = engine.start("legacy", key="a-legacy", input={"n": 2})
    _killed_at(
        workers, [{"point": "effect.before_dispatch", "action": "kill", "match": {"seq": 1}}]
    )

    workers.recover()

    record = engine.get(started.instance_id)
    assert record.status is InstanceStatus.MANUAL_INTERVENTION
    [effect] = engine.detail(started.instance_id).effects
    assert workers.service.received_count("legacy", effect.idempotency_key) == 0


def test_crash_after_local_step_before_journal(workers: Any, engine: SyncEngine) -> None:
    """A local step whose result was computed but not journaled runs again; nothing else.

    Killed at step.after_execute of the first (local) step: no effect was intended yet, so
    recovery reruns the step and continues; every effect is applied once.
    """
    started = engine.start("order", key="local-1", input=ORDER)
    _killed_at(workers, [{"point": "step.after_execute", "action": "kill", "match": {"seq": 1}}])
    assert engine.detail(started.instance_id).steps == []

    workers.recover()

    assert engine.result(started.instance_id, timeout=5)["total"] == 7
    _assert_each_applied_once(workers.service, engine, started.instance_id)
