"""Adopt on clean replay: a deploy that changes a workflow's code (same version, another
fingerprint) strands nothing, on each backend.

Orders run with ``v1`` code (``tests/replay_shop.py``) until they wait for ``go``; that code's
worker then stops. A worker with edited code of order v1 takes over each one as it becomes due:
a journal that replays clean is adopted (repinned, claimed, audited with the worker as actor
and the verdict as evidence, in one transaction) and finished on the new code; one that does
not is flagged ``replay_divergence`` with where the two part and left untouched. While a worker
with the old code is live, nothing moves; ``on_new_code="pinned"`` moves nothing. And nothing
waits in silence: a waiter is told which code nobody serves, a worker logs and exports it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import ledgerflow as lf
from conditions import until
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model import detection
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.routing import Served
from ledgerflow.operators.service import Operations
from ledgerflow.storage import open_store
from processes import LEDGERFLOW
from replay_shop import ORDER, run_orders, shop

WAITING = {**ORDER, "wait": True}


@pytest.fixture
def waiting(journal_url: str) -> dict[str, str]:
    """Two orders waiting for ``go`` under v1 code, whose worker has stopped."""
    return asyncio.run(run_orders(journal_url, shop("v1").registry, a=WAITING, b=WAITING))


def _go_and_work(url: str, registry: lf.Registry, *instance_ids: str) -> None:
    """Deliver ``go`` to each (they become due) and run a worker with ``registry``'s code."""

    async def main() -> None:
        async with lf.Engine(url, registry) as engine:
            for instance_id in instance_ids:
                await engine.signal(instance_id, "go", event_id=f"go-{instance_id}")
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

    asyncio.run(main())


def _state(url: str, instance_id: str) -> tuple[lf.InstanceRecord, list[Any], list[str]]:
    store = open_store(url)
    try:
        record = store.get_instance(InstanceId(instance_id))
        assert record is not None
        flags = [f.reason_code for f in store.open_flags(InstanceId(instance_id))]
        audit = store.audit_records(AuditQuery(instance_id=InstanceId(instance_id), kind="adopt"))
        return record, audit, flags
    finally:
        store.close()


def test_a_compatible_edit_adopts_what_comes_due_and_finishes_it(
    journal_url: str, waiting: dict[str, str]
) -> None:
    """Goal: the edited code's worker adopts an instance pinned to the old code once it is due
    (the old code's worker is gone), with its audit record and timeline entry, and finishes it
    on the new code; one still waiting is left as it is until it comes due."""
    clean = shop("clean")
    old = shop("v1").registry.get("order", 1).fingerprint
    new = clean.registry.get("order", 1).fingerprint
    _go_and_work(journal_url, clean.registry, waiting["a"])
    record, audit, flags = _state(journal_url, waiting["a"])
    assert (record.status, record.fingerprint) == (lf.InstanceStatus.SUCCEEDED, new)
    assert record.result_value == "done, 7"  # the edited code's result: it ran there
    [adopted] = audit
    assert adopted.actor.startswith("ledgerflow:worker:")
    assert adopted.outcome == "applied"
    assert json.loads(adopted.evidence or "{}")["compatible"] is True
    assert json.loads(adopted.plan)["from"]["fingerprint"] == old
    assert (adopted.generation_before, adopted.generation_after) == (1, 2)
    assert flags == []
    with Operations(journal_url) as operations:
        timeline = operations.detail(waiting["a"]).timeline
    [moved] = [e for e in timeline if e.subject == "definition"]
    assert (moved.from_state, moved.to_state) == (f"v1 {old}", f"v1 {new}")
    assert f"audit #{adopted.audit_id}" in (moved.detail or "")
    # Nothing was sent twice: the hold of v1 is not repeated, the mail is sent once.
    assert [c.split()[0] for c in clean.calls] == ["send"]
    still, audit_b, _ = _state(journal_url, waiting["b"])
    assert (still.status, still.fingerprint, audit_b) == (lf.InstanceStatus.WAITING, old, [])


def test_a_divergent_journal_is_flagged_and_never_touched(
    journal_url: str, waiting: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Goal: code whose first step was renamed replays no order: nothing is adopted, each due
    one is flagged replay_divergence with the divergence, left pinned and untouched (its event
    still pending for a worker with its code), and the worker says so."""
    repriced = shop("repriced")
    before, _, _ = _state(journal_url, waiting["a"])
    _go_and_work(journal_url, repriced.registry, waiting["a"])
    record, audit, flags = _state(journal_url, waiting["a"])
    assert audit == []
    assert flags == [detection.REPLAY_DIVERGENCE]
    assert (record.fingerprint, record.generation, record.status) == (
        before.fingerprint,
        before.generation,
        lf.InstanceStatus.WAITING,
    )
    assert repriced.calls == []
    store = open_store(journal_url)
    try:
        [flag] = store.open_flags(InstanceId(waiting["a"]))
        assert store.delivery(InstanceId(waiting["a"]), f"go-{waiting['a']}").state == "PENDING"
    finally:
        store.close()
    assert "mismatch at position 1" in flag.evidence
    assert "the journal holds local 'price'" in flag.evidence
    assert "the code asks for local 'pricing'" in flag.evidence
    warned = [r.getMessage() for r in caplog.records if "not adopting" in r.getMessage()]
    assert len(warned) == 1, warned
    # A waiter hears that the live code does not replay it (a worker with it is live).
    _live_worker(journal_url, Served("order", 1, repriced.registry.get("order", 1).fingerprint))
    engine = lf.SyncEngine(journal_url, shop("v1").registry)
    with engine, pytest.raises(lf.errors.NoCapableWorkerError) as caught:
        engine.result(waiting["a"], timeout=0.05)
    assert "does not replay against the live workers' code (flagged replay_divergence" in str(
        caught.value
    )
    # The old code comes back: it finishes the order, and the scan clears the flag.
    _go_and_work(journal_url, shop("v1").registry)
    store = open_store(journal_url)
    try:
        from ledgerflow.runtime.detection import scan

        scan(store, now=time.time())
        assert store.open_flags(InstanceId(waiting["a"])) == []
    finally:
        store.close()
    done, _, _ = _state(journal_url, waiting["a"])
    assert done.status is lf.InstanceStatus.SUCCEEDED


def test_nothing_moves_while_a_worker_with_the_old_code_is_live(
    journal_url: str, waiting: dict[str, str]
) -> None:
    """Goal: a rolling deploy drains: while a worker serving the old fingerprint is live, the
    new code adopts nothing; once it stops, the next look adopts."""
    clean = shop("clean")
    old = Served("order", 1, shop("v1").registry.get("order", 1).fingerprint)
    store = open_store(journal_url)
    try:
        store.register_worker(
            WorkerRecord(
                worker_id=WorkerId("old-worker"),
                host="h",
                pid=1,
                started_at=time.time(),
                slots=1,
                heartbeat_at=time.time(),
                serves=(old,),
            ),
            now=time.time(),
        )
        _go_and_work(journal_url, clean.registry, waiting["a"])
        record, audit, _ = _state(journal_url, waiting["a"])
        assert (record.fingerprint, audit) == (old.fingerprint, [])
        store.stop_worker(WorkerId("old-worker"), now=time.time())
    finally:
        store.close()
    _go_and_work(journal_url, clean.registry)
    record, audit, _ = _state(journal_url, waiting["a"])
    assert record.status is lf.InstanceStatus.SUCCEEDED
    assert len(audit) == 1


def test_pinned_code_adopts_nothing(journal_url: str, waiting: dict[str, str]) -> None:
    """Goal: a workflow declared on_new_code="pinned" leaves old instances to an operator."""
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))
    mail = registry.add_participant(lf.Participant("mail", deduplicates=True))

    @stock.effect(classification="reversible")
    async def hold(call: lf.EffectCall) -> dict[str, Any]:
        return {"held": call.payload}

    @mail.effect(classification="forward-recovery-only")
    async def send(call: lf.EffectCall) -> dict[str, Any]:
        return {"sent": call.payload}

    @registry.workflow(name="order", version=1, on_new_code="pinned")
    async def order(ctx: lf.WorkflowContext, order: dict[str, Any]) -> str:
        return "never reached"

    assert registry.adopts() == ()
    _go_and_work(journal_url, registry, waiting["a"])
    record, audit, _ = _state(journal_url, waiting["a"])
    assert (record.status, audit) == (lf.InstanceStatus.WAITING, [])
    with pytest.raises(lf.errors.RegistrationError, match="on_new_code must be one of"):
        registry.workflow(name="other", version=1, on_new_code="whenever")


def _live_worker(url: str, serves: Served, worker_id: str = "new-worker") -> None:
    store = open_store(url)
    try:
        now = time.time()
        store.register_worker(
            WorkerRecord(
                worker_id=WorkerId(worker_id),
                host="h",
                pid=1,
                started_at=now,
                slots=1,
                heartbeat_at=now,
                serves=(serves,),
            ),
            now=now,
        )
    finally:
        store.close()


def test_a_waiter_is_told_which_code_nobody_serves_and_how_it_moves(
    journal_url: str, waiting: dict[str, str]
) -> None:
    """Goal: a result asked of an instance whose pinned code no live worker serves says so
    (LF403: the fingerprint, what the live workers serve, how it moves), not "no worker is
    running"; through the engine and through `ledgerflow result`."""
    old = shop("v1").registry.get("order", 1).fingerprint
    new = shop("repriced").registry.get("order", 1).fingerprint
    _live_worker(journal_url, Served("order", 1, new))
    engine = lf.SyncEngine(journal_url, shop("v1").registry)
    with engine, pytest.raises(lf.errors.NoCapableWorkerError) as caught:
        engine.result(waiting["a"], timeout=0.05)
    message = str(caught.value)
    assert message.startswith("[LF403]")
    assert f"pinned to order v1 (fingerprint {old}), which no live worker serves" in message
    assert f"live workers serve order v1 (fingerprint {new})" in message
    assert "adopts it once it is due (at " in message
    assert "if its journal replays clean" in message
    assert "ledgerflow versions upgrade order@1 MODULE:REGISTRY" in message
    assert isinstance(caught.value, lf.errors.ResultTimeoutError)
    shown = subprocess.run(
        [*LEDGERFLOW, "result", waiting["a"], "--timeout", "0.05", "--db", journal_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 1
    [line] = shown.stderr.strip().splitlines()
    assert "LF403" in line
    assert old in line


def test_a_worker_says_what_nobody_serves_at_start_and_exports_it(
    journal_url: str, waiting: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Goal: nothing waits in silence: a worker whose code serves none of the waiting orders'
    fingerprint logs their count at start and exports it as a gauge."""
    old = shop("v1").registry.get("order", 1).fingerprint
    metrics = lf.Metrics(registry=CollectorRegistry())

    async def main() -> None:
        async with lf.Engine(journal_url, shop("repriced").registry, metrics=metrics) as engine:
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
            task = asyncio.create_task(worker.run())
            await until(lambda: worker.periodic.runs("unserved") >= 1, what="the first count")
            worker.stop()
            await task

    asyncio.run(main())
    said = [
        r.getMessage() for r in caplog.records if "which no live worker serves" in r.getMessage()
    ]
    assert len(said) == 1, said
    assert f"2 instance(s) (0 due) pinned to order v1 (fingerprint {old})" in said[0]
    samples = {
        tuple(sorted(s.labels.items())): s.value
        for family in metrics.registry.collect()
        if family.name == "ledgerflow_instances_unserved"
        for s in family.samples
    }
    assert samples == {(("fingerprint", old), ("version", "1"), ("workflow", "order")): 2.0}
