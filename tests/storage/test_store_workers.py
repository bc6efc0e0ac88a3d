"""Routing by capability and the worker registry, on SQLite and PostgreSQL alike (the ``store``
fixture of ``conftest.py``; rows from ``ledger_records``).

The claim takes only instances pinned to a served (workflow, version, fingerprint); the
earliest due time a worker waits for counts only those; workers register, beat and stop; the
scan flags due work that no live worker serves, naming the definition and fingerprint, and
clears the flag once a live worker serves it. Times are explicit: nothing sleeps.
"""

from __future__ import annotations

import dataclasses

from ledger_records import LEASE, W1, W2, new
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model import detection
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.routing import Served
from ledgerflow.runtime.detection import scan
from ledgerflow.storage.store import Store

V1 = Served("order", 1, "fp-1")
V1_EDITED = Served("order", 1, "fp-1b")
V2 = Served("order", 2, "fp-2")
BOUNDS = DetectionBounds(
    unclaimed_after_seconds=10_000, unserved_after_seconds=60, worker_silent_seconds=30
)


def start(store: Store, key: str, served: Served, *, now: float = 0.0) -> InstanceId:
    instance = dataclasses.replace(
        new(key),
        workflow_name=served.workflow_name,
        workflow_version=served.workflow_version,
        fingerprint=served.fingerprint,
    )
    record, created = store.start_instance(instance, now=now)
    assert created
    return record.instance_id


def worker(worker_id: WorkerId, *serves: Served, at: float = 0.0) -> WorkerRecord:
    return WorkerRecord(
        worker_id=worker_id,
        host="host-a",
        pid=4242,
        started_at=at,
        slots=16,
        heartbeat_at=at,
        serves=tuple(serves),
    )


def test_a_claim_takes_only_instances_pinned_to_what_it_serves(store: Store) -> None:
    """Goal: the claim's SQL routes by (workflow, version, fingerprint), and the due time a
    worker waits for counts only what it could claim.

    Method: start one instance each of order v1, v1 with another fingerprint and v2; claim
    with each set of served definitions in turn and compare what each took.
    """
    old, edited, newer = start(store, "a", V1), start(store, "b", V1_EDITED), start(store, "c", V2)
    assert store.next_available_at(serves=[]) is None
    assert store.next_available_at(serves=[V2]) == 0.0
    assert store.claim(owner=W1, now=1.0, lease_seconds=LEASE, limit=10, serves=[]) == []
    took = store.claim(owner=W1, now=1.0, lease_seconds=LEASE, limit=10, serves=[V2])
    assert [r.instance_id for r in took] == [newer]
    took = store.claim(owner=W2, now=1.0, lease_seconds=LEASE, limit=10, serves=[V1, V2])
    assert [r.instance_id for r in took] == [old]
    took = store.claim(owner=W2, now=1.0, lease_seconds=LEASE, limit=10, serves=[V1_EDITED])
    assert [r.instance_id for r in took] == [edited]


def test_workers_register_beat_and_stop(store: Store) -> None:
    """Goal: the registry lists live workers with what they serve; a stopped or silent one is
    not live; a heartbeat for a worker not registered says so.

    Method: register two workers, beat one, stop the other; list live ones at several times.
    """
    store.register_worker(worker(W1, V1, V2, at=100.0), now=100.0)
    store.register_worker(worker(W2, V1_EDITED, at=101.0), now=101.0)
    live = store.workers(live_since=90.0)
    assert [(w.worker_id, w.serves, w.slots, w.host, w.pid) for w in live] == [
        (W1, (V1, V2), 16, "host-a", 4242),
        (W2, (V1_EDITED,), 16, "host-a", 4242),
    ]
    assert store.heartbeat_worker(W1, now=130.0)
    store.stop_worker(W2, now=131.0)
    assert [w.worker_id for w in store.workers(live_since=120.0)] == [W1]
    assert not store.heartbeat_worker(W2, now=132.0)  # stopped: it must register again
    [stopped] = [w for w in store.workers(live_since=None) if w.worker_id == W2]
    assert stopped.stopped_at == 131.0
    assert store.workers(live_since=140.0) == []
    assert not store.heartbeat_worker(WorkerId("nobody"), now=140.0)


def test_scan_flags_due_work_no_live_worker_serves_and_clears_it(store: Store) -> None:
    """Goal: due work pinned to a definition no live worker serves is flagged
    ``no_capable_worker`` past the bound, naming definition and fingerprint, and left
    untouched; the flag clears when a live worker serves it.

    Method: a live worker serving v1 only; start a v2 instance and one of v1 with another
    fingerprint; scan before and after the bound; then register a worker serving both and scan
    again.
    """
    store.register_worker(worker(W1, V1, at=0.0), now=0.0)
    newer, edited = start(store, "new", V2), start(store, "edited", V1_EDITED)
    served = start(store, "served", V1)
    store.heartbeat_worker(W1, now=50.0)
    assert scan(store, BOUNDS, now=50.0).raised == ()
    store.heartbeat_worker(W1, now=61.0)
    report = scan(store, BOUNDS, now=61.0)
    found = {(f.instance_id, f.reason_code): f.evidence for f in report.raised}
    assert set(found) == {
        (newer, detection.NO_CAPABLE_WORKER),
        (edited, detection.NO_CAPABLE_WORKER),
    }
    assert "order v2 (fingerprint fp-2)" in found[newer, detection.NO_CAPABLE_WORKER]
    assert (
        "live workers serve only order v1 (fingerprint fp-1)"
        in found[edited, detection.NO_CAPABLE_WORKER]
    )
    untouched = store.get_instance(newer)
    assert untouched is not None
    assert (untouched.status.value, untouched.owner, untouched.generation) == ("RUNNING", None, 0)
    store.register_worker(worker(W2, V1_EDITED, V2, at=62.0), now=62.0)
    cleared = scan(store, BOUNDS, now=63.0)
    assert set(cleared.cleared) == set(found)
    # Every worker gone silent: all three are unserved, and the evidence says why.
    report = scan(store, BOUNDS, now=200.0)
    assert {f.instance_id for f in report.raised} == {newer, edited, served}
    assert all("no worker is live" in f.evidence for f in report.raised)
