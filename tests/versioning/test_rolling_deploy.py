"""A rolling deploy with real worker processes, on SQLite and PostgreSQL: nothing parked, no
effect applied twice, every in-flight instance finished on the code it is pinned to.

Two workers run the old deploy (``deploy_code:old``, transfer v1) over 200 transfers, half of
which pause between their two effects (waiting for a signal, or on a durable timer). The first
credits are held at the bank, so that they are in flight at the switch. The new
deploy starts beside them: two workers with v1 (same code) and v2 (``deploy_code:new``), one
with a v1 whose code changed without a version bump (``deploy_patched:registry``, another
fingerprint). Then one old worker gets SIGTERM and the other SIGKILL, new transfers are started
(they get v2), and the paused ones are released. Checked from the journal and from the
participant's own ledger; the figures are printed as one JSON line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import deploy_code
import deploy_patched
import pytest

from conditions import eventually
from ledgerflow import InstanceStatus, SyncEngine
from ledgerflow.storage import open_store
from processes import LEDGERFLOW, Service, Workers, child_environment

HERE = Path(__file__).parent
OLD_INSTANCES = 200
NEW_INSTANCES = 50
# Transfers the old deploy finishes before the new one starts (the rest are in flight).
OLD_PHASE_DONE = 20
# Credits the bank holds until the switch, so that they are in flight when the workers stop.
HELD = 8
# Long enough to be still waiting when the old workers stop.
TIMER_SECONDS = 10.0
FINISH_SECONDS = 90.0
# Leases of the deploy's workers: long enough that a live worker starved on a loaded 2-core
# machine keeps its leases (a 1 s one lapsed there three times and parked an instance
# poison_crash_loop between two live workers), short enough for the killed worker's to come
# back within the bounds.
LEASE_SECONDS = 8.0
PARKED = {InstanceStatus.MANUAL_INTERVENTION, InstanceStatus.FORWARD_RECOVERY_REQUIRED}


def _pause(n: int) -> dict[str, Any]:
    kind = ("none", "signal", "none", "timer")[n % 4]
    return {"pause": kind, "seconds": TIMER_SECONDS, "amount": 10 + n}


def _workers(url: str, service: Service, tmp_path: Path, target: str) -> Workers:
    return Workers(
        db_url=url,
        service=service,
        log=tmp_path / "workers.log",
        target=target,
        path=HERE,
        lease_seconds=LEASE_SECONDS,
    )


def _owned(store: Any, instance_id: str) -> bool:
    record = store.get_instance(instance_id)
    return record is not None and record.status is InstanceStatus.RUNNING and bool(record.owner)


def _claimers(store: Any, instance_id: str) -> set[str]:
    return {
        e.to_state
        for e in store.timeline(instance_id)
        if e.subject == "owner" and e.detail == "claimed"
    }


def _workers_json(url: str, service: Service) -> list[dict[str, Any]]:
    """``ledgerflow workers --json``, run as a user runs it."""
    env = child_environment(HERE)
    done = subprocess.run(
        [*LEDGERFLOW, "workers", "--db", url, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=True,
    )
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
    return items


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rolling_deploy_parks_nothing_and_applies_nothing_twice(
    journal_url: str, service: Service, tmp_path: Path
) -> None:
    """Goal: a rolling deploy (old workers stopped, one of them killed, while instances are in
    flight and waiting) parks nothing, applies no effect twice at the participant, finishes
    every old instance on its pinned fingerprint, and starts new work on v2.

    Method: as the module says; then read every instance, its timeline's claimers, and the
    bank's own ledger (rows applied per idempotency key).
    """
    began = time.monotonic()
    store = open_store(journal_url)
    f1 = deploy_code.old.get("transfer", 1).fingerprint
    f1_patched = deploy_patched.registry.get("transfer", 1).fingerprint
    assert f1 != f1_patched
    assert deploy_code.new.get("transfer", 1).fingerprint == f1
    with SyncEngine(journal_url, deploy_code.old) as starter:
        old_ids = [
            starter.start("transfer", key=f"t-{n}", input=_pause(n)).instance_id
            for n in range(OLD_INSTANCES)
        ]
    signalled = [i for n, i in enumerate(old_ids) if _pause(n)["pause"] == "signal"]
    # The credits of a few straight transfers are held at the bank (every attempt of them),
    # so that they are still in flight in the old workers at the switch.
    held = [i for n, i in enumerate(old_ids) if _pause(n)["pause"] == "none"][:HELD]
    service.rules(
        *(
            {"participant": "bank", "operation": "credit", "key_contains": i, "action": "hold",
             "times": 100}
            for i in held
        )
    )  # fmt: skip
    old = _workers(journal_url, service, tmp_path, "deploy_code:old")
    processes = [old.spawn(), old.spawn()]
    try:
        # The old deploy is busy: some transfers are done, many in flight or waiting.
        def old_phase_done() -> bool:
            return store.count_by_status().get(InstanceStatus.SUCCEEDED, 0) >= OLD_PHASE_DONE

        eventually(
            old_phase_done, what="the old workers ran some transfers", timeout=FINISH_SECONDS
        )
        eventually(
            lambda: sum(1 for i in held if _owned(store, i)) == HELD,
            what="the held transfers are in flight in the old workers",
            timeout=FINISH_SECONDS,
        )
        old_phase = time.monotonic() - began
        new = _workers(journal_url, service, tmp_path, "deploy_code:new")
        patched = _workers(journal_url, service, tmp_path, "deploy_patched:registry")
        processes += [new.spawn(), new.spawn(), patched.spawn()]
        eventually(
            lambda: len(_workers_json(journal_url, service)) == 5,
            what="the new workers are live beside the old ones",
            timeout=FINISH_SECONDS,
        )
        listed = _workers_json(journal_url, service)
        serving = {
            w["worker_id"]: {(s["workflow_version"], s["fingerprint"]) for s in w["serves"]}
            for w in listed
        }
        patched_ids = {i for i, s in serving.items() if s == {(1, f1_patched)}}
        new_ids_serving_v2 = {i for i, s in serving.items() if any(v == 2 for v, _ in s)}
        assert (len(patched_ids), len(new_ids_serving_v2)) == (1, 2), serving
        waiting_at_switch = store.count_by_status().get(InstanceStatus.WAITING, 0)
        # The old worker driving the most instances now is killed; the other one is stopped.
        running = store.list_instances(status=InstanceStatus.RUNNING, limit=OLD_INSTANCES)
        by_pid = {w["worker_id"]: w["pid"] for w in listed}
        driving = {p.pid: 0 for p in processes[:2]}
        for record in running:
            pid = by_pid.get(record.owner or "")
            if pid in driving:
                driving[pid] += 1
        stopped, killed = sorted(processes[:2], key=lambda p: driving[p.pid])
        stopped.send_signal(signal.SIGTERM)
        killed.send_signal(signal.SIGKILL)
        # The held credits go through now: the stopping worker's finish, the killed worker's
        # reach the bank after their sender died (the new owner settles them by lookup).
        service.rules()
        service.release("apply")
        assert stopped.wait(timeout=30) == 0
        assert killed.wait(timeout=30) == -signal.SIGKILL
        switched = time.monotonic()
        with SyncEngine(journal_url, deploy_code.new) as starter:
            new_ids = [
                starter.start("transfer", key=f"n-{n}", input=_pause(n * 4)).instance_id
                for n in range(NEW_INSTANCES)
            ]
            for instance_id in signalled:
                starter.signal(instance_id, "release", event_id=f"release-{instance_id}")

        def all_ended() -> bool:
            counts = store.count_by_status()
            live = ("RUNNING", "WAITING", "COMPENSATING", "CANCELLING")
            return not any(counts.get(InstanceStatus(s), 0) for s in live)

        eventually(all_ended, what="every transfer ended", timeout=FINISH_SECONDS)
        finished = time.monotonic()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    records = {i: store.get_instance(i) for i in old_ids + new_ids}
    ledger = service.ledger("bank")
    applied: dict[str, int] = {}
    for row in ledger["applied"]:
        applied[row["key"]] = applied.get(row["key"], 0) + 1
    parked = [i for i, r in records.items() if r is not None and r.status in PARKED]
    duplicates = {key: n for key, n in applied.items() if n > 1}
    # Old instances the new deploy's workers took over (after the signal, the timer, the kill).
    taken_over = sum(1 for i in old_ids if _claimers(store, i) & new_ids_serving_v2)
    figures = {
        "backend": journal_url.split(":", 1)[0],
        "old_instances": OLD_INSTANCES,
        "new_instances": NEW_INSTANCES,
        "waiting_at_switch": waiting_at_switch,
        "running_in_killed_worker": driving[killed.pid],
        "old_finished_by_new_workers": taken_over,
        "effects_applied": len(applied),
        "parked": len(parked),
        "duplicate_effects": len(duplicates),
        "old_phase_seconds": round(old_phase, 1),
        "after_switch_seconds": round(finished - switched, 1),
        "total_seconds": round(finished - began, 1),
    }
    print("ROLLING-DEPLOY " + json.dumps(figures, sort_keys=True))
    assert parked == []
    assert duplicates == {}
    for instance_id in old_ids:
        record = records[instance_id]
        assert record is not None
        assert record.status is InstanceStatus.SUCCEEDED, (record.status, record.reason)
        assert (record.workflow_version, record.fingerprint) == (1, f1)
        assert record.result_value["code"] == "v1"
        assert not _claimers(store, instance_id) & patched_ids
    for instance_id in new_ids:
        record = records[instance_id]
        assert record is not None
        assert record.status is InstanceStatus.SUCCEEDED
        assert (record.workflow_version, record.result_value["code"]) == (2, "v2")
    # Each transfer applied its two effects exactly once at the bank.
    assert len(applied) == 2 * (OLD_INSTANCES + NEW_INSTANCES)
    # The deploy really moved in-flight work: the killed worker was driving some.
    assert taken_over > 0
    assert driving[killed.pid] > 0
    store.close()
