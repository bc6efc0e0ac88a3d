"""Reconciliation against real participant processes over HTTP.

A participant service process (``python -m ledgerflow.demo.service``) keeps its own SQLite
ledger per participant; ``ledgerflow worker`` processes drive the workflows. The reconciler
asks the participants' lookups over HTTP and the verdict comes from three records: the
engine's ledger, the participant's own ledger, and the run record with its audit records and
flags. Waits are bounded; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).parent))

from reconcile_workflows import PARTICIPANTS, build_registry, registry

from ledgerflow import EffectRecord, EffectState, Engine, InstanceStatus, Metrics, SyncEngine
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.reconciliation import EFFECT_DRIFT, RECONCILE_REFUSED
from ledgerflow.operators.async_service import AsyncOperations
from ledgerflow.operators.authority import RECONCILER, Authority
from ledgerflow.operators.service import Operations, ReconciliationRun
from processes import (
    LEDGERFLOW,
    SERVICE_URL_VARIABLE,
    WAIT_SECONDS_MAX,
    Service,
    ServiceProcess,
    Workers,
    child_environment,
)

pytestmark = pytest.mark.slow

ORDER = {"sku": "A-1"}


@pytest.fixture
def participants(tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path / "participants", PARTICIPANTS)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def workers(tmp_path: Path, participants: ServiceProcess) -> Workers:
    assert participants.service is not None
    return Workers.in_folder(
        tmp_path,
        participants.service,
        target="reconcile_workflows:registry",
        path=Path(__file__).parent,
    )


@pytest.fixture
def engine(workers: Workers, monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncEngine]:
    # The built-in authority: only the reconciler holds a role.
    monkeypatch.delenv("LEDGERFLOW_AUTHORITY", raising=False)
    with SyncEngine(workers.db_url, registry) as engine:
        yield engine


def run_reconcile(
    workers: Workers, *, authority: Authority | None = None, **options: Any
) -> ReconciliationRun:
    """One reconciliation in this process, with a registry that speaks to the live service."""
    with Operations(workers.db_url, authority=authority) as operations:
        return operations.reconcile(build_registry(workers.service.url), **options)


def effects(engine: SyncEngine, instance_id: str) -> dict[str, EffectRecord]:
    return {e.operation: e for e in engine.detail(instance_id).effects}


def reconciled_at(workers: Workers) -> dict[str, float | None]:
    """When each effect was last compared (not part of the ledger records, so read raw)."""
    path = workers.db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT idempotency_key, reconciled_at FROM lf_effects").fetchall()
    return dict(rows)


def ledger_snapshot(engine: SyncEngine, instance_id: str) -> tuple[Any, ...]:
    detail = engine.detail(instance_id)
    return (
        detail.instance,
        detail.steps,
        detail.effects,
        detail.timeline,
        engine.store.audit_records(),
        engine.store.open_flags(),
        engine.store.reconciliations(),
    )


def lose_at_participant(service: Service, participant: str, key: str) -> None:
    """Drift: the participant loses an applied effect behind the ledger's back (raw SQL)."""
    path = service.folder / f"{participant}.participant.db"
    with sqlite3.connect(path) as db:
        assert db.execute("DELETE FROM applied WHERE key = ?", (key,)).rowcount == 1


def park_with_reply_lost(
    engine: SyncEngine, workers: Workers, participants: ServiceProcess, key: str
) -> str:
    """The participant applies the reservation, the worker dies before recording it, and the
    participant is down when the next worker asks its lookup: parked effect_outcome_unknown."""
    started = engine.start("order", key=key, input=ORDER)
    workers.killed_at([{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": 1}}])
    participants.stop()
    workers.recover()
    participants.start()
    parked = engine.get(started.instance_id)
    assert parked.status is InstanceStatus.MANUAL_INTERVENTION, parked
    assert parked.reason_code == "effect_outcome_unknown"
    assert effects(engine, started.instance_id)["reserve"].state is EffectState.UNKNOWN
    return started.instance_id


def test_an_effect_the_participant_applied_but_the_ledger_doubts_is_corrected(
    engine: SyncEngine, workers: Workers, participants: ServiceProcess
) -> None:
    """Goal: (a) ledger UNKNOWN, participant applied: the reconciler settles it through the
    audited repair command, the instance resumes and a worker finishes it; applied once.
    (d) A dry run first asks the same question and changes nothing.

    Method: a worker dies after the participant applied the reservation and before the outcome
    is durable; the participant is down when the next worker asks its lookup, so the instance
    parks effect_outcome_unknown; the participant comes back. A dry run reports the correction
    it would make and leaves ledger, audit, flags, runs and comparison stamps as they were.
    The real run confirms the effect with the participant's receipt (audit record by the
    reconciler, named in the run's detail line), resumes the instance, and a worker then
    finishes it: each key applied exactly once in the participants' own ledgers.
    """
    instance_id = park_with_reply_lost(engine, workers, participants, "rec-a")
    service = participants.service
    assert service is not None
    key = effects(engine, instance_id)["reserve"].idempotency_key
    before = ledger_snapshot(engine, instance_id)

    dry = run_reconcile(workers, limit=10, dry_run=True)
    assert (dry.run_id, dry.dry_run, dry.compared, dry.corrected) == (None, True, 1, 1)
    [line] = dry.details
    assert (line["key"], line["action"], line["audit_id"]) == (key, "would-correct", None)
    assert ledger_snapshot(engine, instance_id) == before
    assert reconciled_at(workers) == {key: None}

    run = run_reconcile(workers, limit=10)
    assert (run.compared, run.matched, run.corrected, run.escalated, run.unreachable) == (
        1,
        0,
        1,
        0,
        0,
    )
    [receipt] = service.applied("inventory", key)
    reserve = effects(engine, instance_id)["reserve"]
    assert reserve.state is EffectState.CONFIRMED
    assert json.loads(reserve.evidence or "null") == {
        "participant": "inventory",
        "operation": "reserve",
        "key": key,
        "effect_id": reserve.effect_id,
        "applied_seq": receipt["seq"],
    }
    [audit] = engine.store.audit_records(AuditQuery(instance_id=reserve.instance_id))
    assert (audit.actor, audit.role, audit.kind, audit.outcome) == (
        RECONCILER,
        "reconciler",
        "resolve-effect",
        "applied",
    )
    assert audit.reason == f"reconciliation run {run.run_id}: participant reports applied"
    [line] = run.details
    assert line["action"] == "corrected"
    assert line["audit_id"] == audit.audit_id
    assert (line["ledger_state"], line["participant_verdict"]) == ("UNKNOWN", "applied")
    assert engine.get(instance_id).status is InstanceStatus.RUNNING
    assert engine.store.reconciliations() == [run]
    assert reconciled_at(workers) == {key: run.started_at}

    workers.recover()

    assert engine.get(instance_id).status is InstanceStatus.SUCCEEDED
    for effect in effects(engine, instance_id).values():
        assert effect.state is EffectState.CONFIRMED
        assert service.applied_count(effect.participant, effect.idempotency_key) == 1
    assert service.received_count("inventory", key) == 1


def test_a_confirmed_effect_the_participant_lost_is_escalated_as_drift(
    engine: SyncEngine, workers: Workers
) -> None:
    """Goal: (b) ledger CONFIRMED, participant has no record: escalated with effect_drift and
    the evidence, nothing re-applied, nothing in the ledger changed but the comparison stamp.

    Method: an order finishes; its reservation is deleted from the participant's own ledger
    file with raw SQL. A dry run (d) reports the escalation and writes nothing. The real run
    compares both effects: shipping matches, the reservation is escalated; the instance's
    ledger, events and audit log are exactly as before, the flag carries both sides' facts,
    and the participant received nothing new.
    """
    service = workers.service
    started = engine.start("order", key="rec-b", input=ORDER)
    workers.recover()
    assert engine.get(started.instance_id).status is InstanceStatus.SUCCEEDED
    reserve = effects(engine, started.instance_id)["reserve"]
    lose_at_participant(service, "inventory", reserve.idempotency_key)
    received = service.received_count("inventory", reserve.idempotency_key)
    before = ledger_snapshot(engine, started.instance_id)

    dry = run_reconcile(workers, limit=10, dry_run=True)
    assert (dry.compared, dry.matched, dry.escalated) == (2, 1, 1)
    assert [d["action"] for d in dry.details] == ["would-escalate"]
    assert ledger_snapshot(engine, started.instance_id) == before
    assert set(reconciled_at(workers).values()) == {None}

    run = run_reconcile(workers, limit=10)

    assert (run.compared, run.matched, run.corrected, run.escalated, run.unreachable) == (
        2,
        1,
        0,
        1,
        0,
    )
    [line] = run.details
    assert line == {
        "effect_id": reserve.effect_id,
        "instance_id": started.instance_id,
        "key": reserve.idempotency_key,
        "participant": "inventory",
        "operation": "reserve",
        "ledger_state": "CONFIRMED",
        "participant_verdict": "not-applied",
        "action": "escalated",
        "audit_id": None,
        "flag": EFFECT_DRIFT,
        "note": "drift: the ledger says confirmed, the participant has no record of it",
    }
    [flag] = engine.store.open_flags()
    assert (flag.instance_id, flag.reason_code, flag.detected_by) == (
        started.instance_id,
        EFFECT_DRIFT,
        RECONCILER,
    )
    evidence = json.loads(flag.evidence)
    assert evidence["key"] == reserve.idempotency_key
    assert evidence["run_id"] == run.run_id
    assert (evidence["ledger_state"], evidence["participant_verdict"]) == (
        "CONFIRMED",
        "not-applied",
    )
    assert json.loads(evidence["ledger_evidence"]) == json.loads(reserve.evidence or "null")
    after = ledger_snapshot(engine, started.instance_id)
    assert after[:5] == before[:5]
    assert engine.store.reconciliations() == [run]
    assert set(reconciled_at(workers).values()) == {run.started_at}
    assert service.applied_count("inventory", reserve.idempotency_key) == 0
    assert service.received_count("inventory", reserve.idempotency_key) == received


def test_a_run_is_bounded_and_the_next_run_continues_with_the_rest(
    engine: SyncEngine, workers: Workers
) -> None:
    """Goal: (c) at most ``limit`` effects per run, and consecutive runs cover every effect.

    Method: three orders finish (six confirmed effects). A run with limit 4 compares four and
    stamps exactly those; the next run with limit 4 compares the two never compared first,
    so after two runs every effect has been compared; both runs are recorded, newest first.
    """
    for n in range(3):
        engine.start("order", key=f"rec-c-{n}", input=ORDER)
    workers.recover()
    first = run_reconcile(workers, limit=4)
    assert (first.compared, first.matched, first.details) == (4, 4, ())
    stamps = reconciled_at(workers)
    assert sorted(stamps.values(), key=lambda v: v is None) == [first.started_at] * 4 + [None] * 2
    left = {k for k, v in stamps.items() if v is None}

    second = run_reconcile(workers, limit=4)

    assert (second.compared, second.matched) == (4, 4)
    stamps = reconciled_at(workers)
    assert None not in stamps.values()
    assert {k for k, v in stamps.items() if v == second.started_at} >= left
    assert engine.store.reconciliations() == [second, first]


def test_the_worker_periodic_task_and_the_cli_reconcile_through_the_entry_point(
    engine: SyncEngine, workers: Workers, tmp_path: Path
) -> None:
    """Goal: the same run is reachable from a worker's periodic task (attributed to the
    reconciler) and from ``ledgerflow reconcile`` run as a real process.

    Method: an order finishes and its shipment is lost at the participant. ``reconcile
    --dry-run --json`` reports the escalation and ``--runs --json`` shows no run; the periodic
    task, run once, escalates it; ``reconcile --json`` then finds the flag already open (one
    flag per instance and reason) and ``--runs --json`` lists both runs, newest first.
    """
    service = workers.service
    started = engine.start("order", key="rec-cli", input=ORDER)
    workers.recover()
    ship = effects(engine, started.instance_id)["ship"]
    lose_at_participant(service, "shipping", ship.idempotency_key)

    def cli(*args: str) -> Any:
        variables = {SERVICE_URL_VARIABLE: service.url, "LEDGERFLOW_DB": workers.db_url}
        env = child_environment(workers.path, **variables)
        done = subprocess.run(
            [*LEDGERFLOW, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT_SECONDS_MAX,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    dry = cli("reconcile", "reconcile_workflows:registry", "--dry-run", "--json")
    assert (dry["dry_run"], dry["run_id"], dry["escalated"]) == (True, None, 1)
    assert cli("reconcile", "--runs", "--json") == {"items": []}

    counted = CollectorRegistry()

    async def periodic_run() -> None:
        metrics = Metrics(counted)
        async with Engine(workers.db_url, registry, metrics=metrics) as engine:
            operations = AsyncOperations(engine)
            task = operations.reconcile_task(build_registry(service.url), interval_seconds=60)
            await task.run()

    asyncio.run(periodic_run())
    [flag] = engine.store.open_flags(started.instance_id)
    assert (flag.reason_code, flag.detected_by) == (EFFECT_DRIFT, RECONCILER)
    # The worker's metrics count the run: one effect matched, one drifted (escalated).
    reconciled = "ledgerflow_reconciliation_effects_total"
    assert counted.get_sample_value(reconciled, {"action": "matched"}) == 1
    assert counted.get_sample_value(reconciled, {"action": "escalated"}) == 1
    assert counted.get_sample_value(reconciled, {"action": "corrected"}) is None

    ran = cli("reconcile", "reconcile_workflows:registry", "--json")
    assert (ran["compared"], ran["matched"], ran["escalated"]) == (2, 1, 1)
    assert ran["details"][0]["note"].endswith(f"(a {EFFECT_DRIFT} flag was already open)")
    runs = cli("reconcile", "--runs", "--json")["items"]
    assert [r["run_id"] for r in runs] == [ran["run_id"], ran["run_id"] - 1]
    assert all(r["actor"] == RECONCILER and r["finished_at"] is not None for r in runs)


def test_corrections_are_bounded_and_a_refused_one_is_escalated_not_retried(
    engine: SyncEngine, workers: Workers, participants: ServiceProcess, tmp_path: Path
) -> None:
    """Goal: at most ``max_corrections`` per run (the rest wait, unstamped, for the next run),
    and a correction the repair command refuses is handed to a person, never worked around.

    Method: two instances parked with a reservation the participant applied. Under a policy
    that takes the reconciler's role away, the run's corrections are refused: both escalated
    as reconcile_refused, each refusal in the audit log, the ledger unchanged. Under the
    built-in policy with max_corrections=1, one is corrected and the other deferred; the next
    run corrects the deferred one. Every reservation was applied exactly once.
    """
    parked = [
        park_with_reply_lost(engine, workers, participants, f"rec-bound-{n}") for n in range(2)
    ]
    service = participants.service
    assert service is not None
    policy = tmp_path / "authority.toml"
    policy.write_text('[actors]\n"ledgerflow:reconciler" = []\n', encoding="utf-8")

    refused = run_reconcile(workers, authority=Authority.from_file(policy), limit=10)

    assert (refused.compared, refused.corrected, refused.escalated) == (2, 0, 2)
    assert {d["flag"] for d in refused.details} == {RECONCILE_REFUSED}
    assert all("correction refused" in d["note"] for d in refused.details)
    audits = engine.store.audit_records()
    assert [(a.actor, a.outcome) for a in audits] == [(RECONCILER, "refused")] * 2
    for instance_id in parked:
        assert engine.get(instance_id).status is InstanceStatus.MANUAL_INTERVENTION
        assert effects(engine, instance_id)["reserve"].state is EffectState.UNKNOWN

    first = run_reconcile(workers, limit=10, max_corrections=1)

    assert (first.compared, first.corrected) == (2, 1)
    actions = sorted(d["action"] for d in first.details)
    assert actions == ["corrected", "deferred"]
    deferred = next(d for d in first.details if d["action"] == "deferred")
    assert reconciled_at(workers)[deferred["key"]] == refused.started_at

    second = run_reconcile(workers, limit=10, max_corrections=1)

    assert [d["action"] for d in second.details] == ["corrected"]
    assert second.details[0]["key"] == deferred["key"]
    workers.recover()
    for instance_id in parked:
        assert engine.get(instance_id).status is InstanceStatus.SUCCEEDED
        reserve = effects(engine, instance_id)["reserve"]
        assert service.applied_count("inventory", reserve.idempotency_key) == 1


def test_an_unreachable_participant_is_counted_and_nothing_changes(
    engine: SyncEngine, workers: Workers, participants: ServiceProcess
) -> None:
    """Goal: a lookup that cannot be made proves nothing: counted unreachable, no flag, no
    repair, and the effects go to the back of the queue (a participant that is down must not
    hold up the others' turns).

    Method: an order finishes; the participant service stops; a run compares both effects,
    both unreachable with the connection error in the detail line; the ledger, audit log and
    flags are as before; both effects are stamped.
    """
    started = engine.start("order", key="rec-down", input=ORDER)
    workers.recover()
    before = ledger_snapshot(engine, started.instance_id)
    participants.stop()

    run = run_reconcile(workers, limit=10)

    assert (run.compared, run.matched, run.escalated, run.unreachable) == (2, 0, 0, 2)
    assert {d["action"] for d in run.details} == {"unreachable"}
    assert all(d["note"].startswith("the lookup failed: ConnectError") for d in run.details)
    assert ledger_snapshot(engine, started.instance_id)[:6] == before[:6]
    assert set(reconciled_at(workers).values()) == {run.started_at}
