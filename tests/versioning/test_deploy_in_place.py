"""A deploy that edits the code in place (same versions, new fingerprints) strands nothing:
real worker processes, on SQLite and PostgreSQL.

Two workers run the old deploy (``adopt_code:old``) over 100 transfers and 100 payouts, half of
which pause between their two effects (for a signal, or on a durable timer); some credits are
held at the bank so that they are in flight at the switch. Once every instance has sent its
first effect, the next deploy starts: a worker with a compatible edit of ``transfer``
(``adopt_code:compatible``) and one with an incompatible edit of ``payout``
(``adopt_code:incompatible``). One old worker gets SIGTERM, the other SIGKILL, the held
credits go through and the paused instances are released.

Every transfer must then finish, each one in flight at the switch on the new code with its
adoption on the audit log; every payout in flight must be flagged ``replay_divergence`` with
its divergence within a scan interval of coming due, and never be touched by the new code. A
worker with the old code then finishes the payouts and the scan clears their flags. Nothing is
parked and no effect is applied twice (the bank's own ledger). The figures print as one line.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import adopt_code
import pytest

from conditions import eventually
from ledgerflow import InstanceStatus, SyncEngine
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model import detection
from ledgerflow.runtime.detection import ENVIRONMENT_VARIABLE as DETECTION_VARIABLE
from ledgerflow.storage import open_store
from processes import Service, Workers

HERE = Path(__file__).parent
INSTANCES = 100  # of each workflow
HELD = 6  # credits held at the bank until the switch
TIMER_SECONDS = 6.0
SCAN_SECONDS = 2.0
FINISH_SECONDS = 90.0
# Leases of the deploy's workers: long enough that a live worker starved on a loaded 2-core
# machine keeps its leases (a lapse there marks an effect in flight UNKNOWN and takes the
# instance over), short enough that the killed worker's come back within the bounds.
LEASE_SECONDS = 8.0
# The killed worker counts as live this long after its last beat: the new deploy adopts
# nothing before the old one is read (``in_flight``), and a starved live worker is not
# taken for dead.
SILENT_SECONDS = 5.0
PARKED = {InstanceStatus.MANUAL_INTERVENTION, InstanceStatus.FORWARD_RECOVERY_REQUIRED}
LIVE = {InstanceStatus(s) for s in ("RUNNING", "WAITING", "COMPENSATING", "CANCELLING")}


def _pause(n: int) -> dict[str, Any]:
    kind = ("none", "signal", "none", "timer")[n % 4]
    return {"pause": kind, "seconds": TIMER_SECONDS, "amount": 10 + n}


class Deploy:
    """The worker processes of one target, all logging to one file of the test."""

    def __init__(self, url: str, service: Service, tmp_path: Path) -> None:
        self.url, self.service, self.log = url, service, tmp_path / "workers.log"
        self.processes: list[Any] = []

    def spawn(self, target: str) -> Any:
        workers = Workers(
            db_url=self.url,
            service=self.service,
            log=self.log,
            target=target,
            path=HERE,
            lease_seconds=LEASE_SECONDS,
        )
        process = workers.spawn()
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


@pytest.fixture
def deploy(
    journal_url: str, service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    # The workers scan (and flag) every SCAN_SECONDS; a worker is live while it beats.
    monkeypatch.setenv(
        DETECTION_VARIABLE,
        f"scan_interval_seconds={SCAN_SECONDS},worker_silent_seconds={SILENT_SECONDS:g}",
    )
    made = Deploy(journal_url, service, tmp_path)
    yield made
    made.stop_all()


def _first_effect_sent(store: Any, ids: list[str]) -> bool:
    return all(store.effects(i) for i in ids)


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_an_in_place_deploy_continues_what_replays_and_flags_what_does_not(
    journal_url: str, service: Service, deploy: Deploy
) -> None:
    began = time.monotonic()
    store = open_store(journal_url)
    fingerprints = {
        name: registry.get(workflow, 1).fingerprint
        for name, registry, workflow in (
            ("transfer", adopt_code.old, "transfer"),
            ("transfer_fixed", adopt_code.compatible, "transfer"),
            ("payout", adopt_code.old, "payout"),
            ("payout_fee", adopt_code.incompatible, "payout"),
        )
    }
    assert len(set(fingerprints.values())) == 4
    with SyncEngine(journal_url, adopt_code.old) as starter:
        transfers = [
            starter.start("transfer", key=f"t-{n}", input=_pause(n)).instance_id
            for n in range(INSTANCES)
        ]
        payouts = [
            starter.start("payout", key=f"p-{n}", input=_pause(n)).instance_id
            for n in range(INSTANCES)
        ]
    everyone = transfers + payouts
    pauses = {i: _pause(n % INSTANCES)["pause"] for n, i in enumerate(everyone)}
    signalled = [i for i in everyone if pauses[i] == "signal"]
    held = [i for i in everyone if pauses[i] == "none"][:HELD]
    service.rules(
        *(
            {"participant": "bank", "operation": "credit", "key_contains": i, "action": "hold",
             "times": 100}
            for i in held
        )
    )  # fmt: skip
    first, second = deploy.spawn("adopt_code:old"), deploy.spawn("adopt_code:old")
    eventually(
        lambda: _first_effect_sent(store, everyone),
        what="every instance sent its first effect under the old code",
        timeout=FINISH_SECONDS,
    )
    # The held credits are at the bank, in flight, before the switch (not merely about to be).
    service.wait_held(HELD)
    deploy.spawn("adopt_code:compatible")
    deploy.spawn("adopt_code:incompatible")
    first.send_signal(signal.SIGTERM)
    second.send_signal(signal.SIGKILL)
    service.rules()
    service.release("apply")
    assert first.wait(timeout=30) == 0
    assert second.wait(timeout=30) == -signal.SIGKILL
    switched = time.monotonic()
    # What the old deploy left unfinished (the killed worker still counts as live for its
    # silence bound, so nothing was adopted yet): what the new deploy must carry on or flag.
    in_flight = {i for i in everyone if store.get_instance(i).status in LIVE}
    with SyncEngine(journal_url, adopt_code.old) as sender:
        for instance_id in signalled:
            sender.signal(instance_id, "release", event_id=f"release-{instance_id}")

    def transfers_ended() -> bool:
        return all(store.get_instance(i).status not in LIVE for i in transfers)

    eventually(transfers_ended, what="every transfer ended", timeout=FINISH_SECONDS)
    transfers_done = time.monotonic()
    stuck_payouts = [i for i in payouts if i in in_flight]

    def flagged(instance_id: str) -> bool:
        reasons = {f.reason_code for f in store.open_flags(instance_id)}
        return detection.REPLAY_DIVERGENCE in reasons

    # Each comes due by its timer, its signal or the killed worker's lease, after the old
    # workers count as gone; the incompatible worker then flags it at its next look.
    flag_by = switched + SILENT_SECONDS + max(TIMER_SECONDS, LEASE_SECONDS) + 4 * SCAN_SECONDS
    eventually(
        lambda: all(flagged(i) for i in stuck_payouts),
        what="every payout in flight flagged replay_divergence",
        timeout=max(flag_by - time.monotonic(), 4 * SCAN_SECONDS),
    )
    payouts_flagged = time.monotonic()
    # Each flagged payout is untouched: still pinned to the old code, never claimed by the
    # incompatible worker, its divergence named.
    for instance_id in stuck_payouts:
        record = store.get_instance(instance_id)
        assert record.fingerprint == fingerprints["payout"]
        assert record.status not in PARKED
        [flag] = [f for f in store.open_flags(instance_id) if f.reason_code == "replay_divergence"]
        assert "mismatch at position 1" in flag.evidence, flag.evidence
        assert '"fee":1' in flag.evidence
    claimed_by = {
        i: {e.to_state for e in store.timeline(i) if (e.subject, e.detail) == ("owner", "claimed")}
        for i in stuck_payouts
    }
    adopted = store.audit_records(AuditQuery(kind="adopt", limit=10_000))
    adopted_ids = {a.instance_id for a in adopted}
    # The old code comes back for the payouts: it finishes them, and the scan clears the flags.
    deploy.spawn("adopt_code:old")

    def payouts_ended_and_cleared() -> bool:
        ended = all(store.get_instance(i).status not in LIVE for i in payouts)
        return ended and not any(flagged(i) for i in stuck_payouts)

    eventually(
        payouts_ended_and_cleared,
        what="the old code finished the payouts and the flags cleared",
        timeout=FINISH_SECONDS,
    )
    finished = time.monotonic()
    records = {i: store.get_instance(i) for i in everyone}
    applied: dict[str, int] = {}
    for row in service.ledger("bank")["applied"]:
        applied[row["key"]] = applied.get(row["key"], 0) + 1
    parked = [i for i, r in records.items() if r.status in PARKED]
    duplicates = {key: n for key, n in applied.items() if n > 1}
    transfers_in_flight = [i for i in transfers if i in in_flight]
    figures = {
        "backend": journal_url.split(":", 1)[0],
        "instances": len(everyone),
        "in_flight_at_switch": len(in_flight),
        "transfers_adopted": len(adopted_ids & set(transfers)),
        "payouts_flagged": len(stuck_payouts),
        "payouts_adopted": len(adopted_ids & set(payouts)),
        "effects_applied": len(applied),
        "duplicate_effects": len(duplicates),
        "parked": len(parked),
        "old_phase_seconds": round(switched - began, 1),
        "transfers_done_after_switch_seconds": round(transfers_done - switched, 1),
        "payouts_flagged_after_switch_seconds": round(payouts_flagged - switched, 1),
        "total_seconds": round(finished - began, 1),
    }
    print("IN-PLACE-DEPLOY " + json.dumps(figures, sort_keys=True))
    assert parked == []
    assert duplicates == {}
    assert len(applied) == 2 * len(everyone)
    assert transfers_in_flight, "no transfer was in flight at the switch"
    assert stuck_payouts, "no payout was in flight at the switch"
    for instance_id in transfers:
        record = records[instance_id]
        assert record.status is InstanceStatus.SUCCEEDED, (record.status, record.reason)
        if instance_id in in_flight:
            assert instance_id in adopted_ids
            assert record.fingerprint == fingerprints["transfer_fixed"]
            assert record.result_value["code"] == "fixed"
    for instance_id in payouts:
        record = records[instance_id]
        assert record.status is InstanceStatus.SUCCEEDED, (record.status, record.reason)
        assert record.fingerprint == fingerprints["payout"]
        assert record.result_value["code"] == "old"
    assert not adopted_ids & set(payouts)
    for audit in adopted:
        assert audit.actor.startswith("ledgerflow:worker:")
        assert json.loads(audit.evidence or "{}")["compatible"] is True
    workers_seen = {w for owners in claimed_by.values() for w in owners}
    incompatible_ids = {
        w.worker_id
        for w in store.workers(live_since=None)
        if any(s.fingerprint == fingerprints["payout_fee"] for s in w.serves)
    }
    assert incompatible_ids
    assert not workers_seen & incompatible_ids
    store.close()
