"""Audited repairs: each kind planned (dry run: nothing changes) and applied (the exact change,
one audit record, timeline entries naming it), then finished by a real in-process worker.

Instances are brought into each state a person must settle by the workflows of
``repair_workflows`` (a lost reply, a final rejection, a failing refund, a poison step). The
contract tests that a store must keep (apply, repeat, stale precondition) run on SQLite files
and on PostgreSQL.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import repair_workflows as wf
from prometheus_client import CollectorRegistry
from repair_workflows import drain, parked_unknown, started

from ledgerflow import Metrics, SyncEngine
from ledgerflow.errors import NotAuthorizedError, RepairRefusedError, StalePreconditionError
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.repair import RepairKind
from ledgerflow.model.step import StepStatus
from ledgerflow.operators.authority import RECONCILER, Authority
from ledgerflow.operators.repairs import RepairRequest, RepairResult, Repairs
from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store

pytestmark = pytest.mark.usefixtures("repair_faults")


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/journal.db"


def ledger_state(store: Store, instance_id: InstanceId) -> dict[str, Any]:
    """Everything a repair could change: instance, journal, timeline, audit log."""
    instance = store.get_instance(instance_id)
    assert instance is not None
    journal = store.journal(instance_id, instance.run)
    return {
        "instance": instance,
        "steps": dict(journal.steps),
        "effects": dict(journal.effects),
        "events": store.timeline(instance_id),
        "audit": store.audit_records(AuditQuery(instance_id=instance_id)),
    }


def request(kind: RepairKind, instance_id: InstanceId, **extra: Any) -> RepairRequest:
    fields: dict[str, Any] = {"actor": "alice", "reason": "ticket OPS-1", **extra}
    return RepairRequest(kind=kind, instance_id=instance_id, **fields)


def dry_then_apply(ops: Repairs, req: RepairRequest) -> RepairResult:
    """The dry run changes nothing at all and shows exactly the plan that is then applied."""
    before = ledger_state(ops.store, req.instance_id)
    dry = ops.plan(req)
    assert dry.outcome == "dry-run"
    assert dry.audit_id is None
    assert ledger_state(ops.store, req.instance_id) == before
    applied = ops.apply(req, planned=dry.plan)
    assert applied.outcome == "applied"
    assert applied.plan == dry.plan
    return applied


def assert_one_applied_audit(store: Store, instance_id: InstanceId, result: RepairResult) -> None:
    records = [
        r
        for r in store.audit_records(AuditQuery(instance_id=instance_id))
        if r.outcome == "applied"
    ]
    assert [r.audit_id for r in records][-1] == result.audit_id
    record = records[-1]
    assert (record.actor, record.role) == ("alice", "operator")
    assert json.loads(record.plan)["describe"] == result.plan.describe()
    tagged = [
        e for e in store.timeline(instance_id) if f"repair #{result.audit_id} " in (e.detail or "")
    ]
    assert tagged, "every change names its audit record in the timeline"


# -- resolve-effect, and the store contract (both backends) --------------------------------------


def test_resolve_effect_applied_then_a_worker_finishes(
    journal_url: str, authority: Authority, caplog: pytest.LogCaptureFixture
) -> None:
    """Goal: an UNKNOWN effect resolved as applied with evidence, with --resume, is finished by
    a worker, and the workflow sees the evidence as the effect's result; applied once. The
    repair is logged once (not its dry run), with the instance and step as fields.

    Method: lose the charge's reply (parked, effect UNKNOWN); dry run, then apply; check the
    exact change, the audit record, the timeline and the log; drain a worker; compare.
    """
    instance_id = parked_unknown(journal_url, "r-1")
    store = open_store(journal_url)
    try:
        parked = store.get_instance(instance_id)
        assert parked is not None
        assert parked.reason_code == "effect_outcome_unknown"
        key = store.effects(instance_id)[0].idempotency_key
        evidence = {"charged": 5, "key": key, "source": "bank ledger row 17"}
        counted = CollectorRegistry()
        ops = Repairs(store, authority, metrics=Metrics(counted))
        result = dry_then_apply(
            ops,
            request(
                RepairKind.RESOLVE_EFFECT,
                instance_id,
                seq=1,
                applied=True,
                evidence=evidence,
                resume=True,
            ),
        )
        # The UNKNOWN outcome settled by a person, counted once (the dry run counts nothing).
        settled = counted.get_sample_value(
            "ledgerflow_unknown_outcomes_settled_total",
            {"participant": "bank", "operation": "charge", "how": "operator"},
        )
        assert settled == 1
        after = ledger_state(store, instance_id)
        assert after["instance"].status is InstanceStatus.RUNNING
        assert after["instance"].generation == parked.generation + 1
        assert after["instance"].owner is None
        effect, step = after["effects"][1], after["steps"][1]
        assert effect.state is EffectState.CONFIRMED
        assert json.loads(effect.evidence) == evidence
        assert effect.idempotency_key == key
        assert step.status is StepStatus.COMPLETED
        assert json.loads(step.output) == evidence
        assert_one_applied_audit(store, instance_id, result)
        [logged] = [r for r in caplog.records if r.name == "ledgerflow.repairs"]
        assert logged.levelname == "WARNING"
        assert f"as audit #{result.audit_id}" in logged.getMessage()
        assert (logged.__dict__["instance"], logged.__dict__["step"]) == (instance_id, 1)
    finally:
        store.close()
    drain(journal_url)
    with SyncEngine(journal_url, wf.registry) as engine:
        assert engine.result(instance_id, timeout=0) == {"receipt": evidence}
    assert [a for a in wf.applied if a[1] == key] == [("charge", key, 1)]


def test_repeating_a_repair_is_a_no_op_that_says_so(journal_url: str, authority: Authority) -> None:
    """Goal: the same repair twice changes things once; the second says it is a no-op.

    Method: resolve an UNKNOWN effect as not applied (no resume), then bob sends the same
    request; the outcome is "no-op" naming the first audit record, nothing changed, both are
    in the audit log.
    """
    instance_id = parked_unknown(journal_url, "r-2")
    store = open_store(journal_url)
    try:
        ops = Repairs(store, authority)
        args = {"seq": 1, "applied": False, "evidence": {"bank": "no such key"}}
        first = ops.apply(request(RepairKind.RESOLVE_EFFECT, instance_id, **args))
        before = ledger_state(store, instance_id)
        again = ops.apply(request(RepairKind.RESOLVE_EFFECT, instance_id, actor="bob", **args))
        assert again.outcome == "no-op"
        assert f"audit #{first.audit_id}" in again.message
        assert "already applied" in again.message
        after = ledger_state(store, instance_id)
        assert {k: v for k, v in after.items() if k != "audit"} == {
            k: v for k, v in before.items() if k != "audit"
        }
        outcomes = [(r.actor, r.outcome) for r in after["audit"]]
        assert outcomes == [("alice", "applied"), ("bob", "no-op")]
    finally:
        store.close()


def test_repeating_a_repair_the_instance_moved_on_from_is_a_no_op(
    journal_url: str, authority: Authority
) -> None:
    """Goal: the same repair asked for again after the instance moved on from it (here: it
    resumed and finished) is a no-op that says so, not a refusal (issue 24: a script run twice
    failed with LF702 while the docs promised a no-op). Its dry run says the same; the repeat
    is on the record as ``no-op``; nothing changes.

    Method: resolve the UNKNOWN charge as applied with --resume; a worker finishes the
    instance; bob plans, then applies, the same request: both name the first audit record and
    the instance's new status; the ledger is as the worker left it; audit: applied, no-op.
    """
    instance_id = parked_unknown(journal_url, "r-moved")
    args = {"seq": 1, "applied": True, "evidence": {"bank": "row 9"}, "resume": True}
    store = open_store(journal_url)
    try:
        first = Repairs(store, authority).apply(
            request(RepairKind.RESOLVE_EFFECT, instance_id, **args)
        )
    finally:
        store.close()
    drain(journal_url)
    store = open_store(journal_url)
    try:
        ops = Repairs(store, authority)
        before = ledger_state(store, instance_id)
        assert before["instance"].status is InstanceStatus.SUCCEEDED
        repeat = request(RepairKind.RESOLVE_EFFECT, instance_id, actor="bob", **args)
        dry = ops.plan(repeat)
        again = ops.apply(repeat)
        for result in (dry, again):
            assert "already applied by alice at " in result.message
            assert f"(audit #{first.audit_id})" in result.message
            assert "moved on since (now SUCCEEDED" in result.message
        assert dry.outcome == "dry-run"
        assert again.outcome == "no-op"
        after = ledger_state(store, instance_id)
        assert {k: v for k, v in after.items() if k != "audit"} == {
            k: v for k, v in before.items() if k != "audit"
        }
        assert [(r.actor, r.outcome) for r in after["audit"]][-2:] == [
            ("alice", "applied"),
            ("bob", "no-op"),
        ]
    finally:
        store.close()


def test_a_plan_made_stale_by_another_repair_is_refused(
    journal_url: str, authority: Authority
) -> None:
    """Goal: a repair whose precondition no longer holds is refused, and both are audited.

    Method: two Repairs on one database; alice plans "applied"; bob applies "not applied";
    alice's apply of her plan raises StalePreconditionError naming bob's audit record.
    """
    instance_id = parked_unknown(journal_url, "r-3")
    alice_store, bob_store = open_store(journal_url), open_store(journal_url)
    try:
        alice, bob = Repairs(alice_store, authority), Repairs(bob_store, authority)
        mine = request(
            RepairKind.RESOLVE_EFFECT, instance_id, seq=1, applied=True, evidence={"x": 1}
        )
        plan = alice.plan(mine).plan
        theirs = request(
            RepairKind.RESOLVE_EFFECT,
            instance_id,
            actor="bob",
            seq=1,
            applied=False,
            evidence={"y": 2},
        )
        bobs = bob.apply(theirs)
        with pytest.raises(StalePreconditionError) as stale:
            alice.apply(mine, planned=plan)
        assert f"audit #{bobs.audit_id}" in stale.value.message
        records = alice_store.audit_records(AuditQuery(instance_id=instance_id))
        assert [(r.actor, r.outcome) for r in records] == [("bob", "applied"), ("alice", "refused")]
        assert "LF703" in (records[1].refusal or "")
        effect = alice_store.effects(instance_id)[0]
        assert effect.state is EffectState.FAILED
    finally:
        alice_store.close()
        bob_store.close()


# -- authority and refusals ---------------------------------------------------------------------


def test_a_repair_without_the_role_is_refused_and_audited(
    sqlite_db: str, authority: Authority
) -> None:
    """Goal: no role, no repair: refused with NotAuthorizedError and recorded as refused.

    Method: the built-in policy refuses alice (and says how to grant a role); carol's file role
    grants nothing; the reconciler may resume. Nothing changes for the refusals.
    """
    instance_id = parked_unknown(sqlite_db, "r-4")
    store = open_store(sqlite_db)
    try:
        before = ledger_state(store, instance_id)
        builtin = Repairs(store, Authority.default())
        with pytest.raises(NotAuthorizedError) as refused:
            builtin.apply(request(RepairKind.RESUME, instance_id))
        assert "LEDGERFLOW_AUTHORITY" in refused.value.message
        with pytest.raises(NotAuthorizedError):
            Repairs(store, authority).apply(request(RepairKind.RESUME, instance_id, actor="carol"))
        after = ledger_state(store, instance_id)
        assert after["instance"] == before["instance"]
        assert after["effects"] == before["effects"]
        assert [(r.actor, r.outcome, r.role) for r in after["audit"]] == [
            ("alice", "refused", None),
            ("carol", "refused", None),
        ]
        resumed = builtin.apply(request(RepairKind.RESUME, instance_id, actor=RECONCILER))
        assert resumed.outcome == "applied"
        assert store.audit_records(AuditQuery(instance_id=instance_id))[-1].role == "reconciler"
    finally:
        store.close()


def test_repairs_the_machine_or_ledger_forbid_are_refused_with_the_reason(
    sqlite_db: str, authority: Authority
) -> None:
    """Goal: a forbidden repair is refused with its reason, audited, and changes nothing.

    Method: on an instance parked with an UNKNOWN effect: a retry (could apply it twice), a
    forced FAILED (the effect may have happened), a forced SUCCEEDED (no such edge); then an
    owned instance (a live lease) refuses a resume.
    """
    instance_id = parked_unknown(sqlite_db, "r-5")
    store = open_store(sqlite_db)
    try:
        ops = Repairs(store, authority)
        before = ledger_state(store, instance_id)
        cases = [
            (request(RepairKind.RETRY_STEP, instance_id, seq=1), "resolve it with evidence first"),
            (
                request(RepairKind.FORCE_TERMINAL, instance_id, status=InstanceStatus.FAILED),
                "its outcome is not settled",
            ),
            (
                request(
                    RepairKind.FORCE_TERMINAL,
                    instance_id,
                    status=InstanceStatus.SUCCEEDED,
                    result={"ok": True},
                ),
                "no edge from MANUAL_INTERVENTION to SUCCEEDED",
            ),
        ]
        for req, why in cases:
            with pytest.raises(RepairRefusedError) as refused:
                ops.apply(req)
            assert why in refused.value.message
        after = ledger_state(store, instance_id)
        assert after["instance"] == before["instance"]
        assert after["effects"] == before["effects"]
        assert [r.outcome for r in after["audit"]] == ["refused"] * 3
        fresh = started(sqlite_db, "pay", "r-5b", {"amount": 1})
        [claimed] = store.claim(
            owner=WorkerId("w-live"), now=time.time(), lease_seconds=600, limit=1
        )
        assert claimed.instance_id == fresh
        with pytest.raises(RepairRefusedError, match="live lease"):
            ops.apply(
                request(RepairKind.FORCE_TERMINAL, fresh, status=InstanceStatus.MANUAL_INTERVENTION)
            )
    finally:
        store.close()


# -- the other kinds ----------------------------------------------------------------------------


def test_retry_step_local_and_effect_under_the_original_identity(
    sqlite_db: str, authority: Authority
) -> None:
    """Goal: a failed step gets one more attempt under its own identity (an effect: the same
    key) and the resumed instance finishes.

    Method: after a pivot, a poison local step ends the instance FORWARD_RECOVERY_REQUIRED;
    retry it; then a charge rejected for good; retry it; the charge is applied once, with the
    original key at attempt 2.
    """
    wf.FAULTS.add("poison-step")
    local = started(sqlite_db, "ship", "r-6", {"to": "ann", "amount": 4})
    drain(sqlite_db)
    wf.FAULTS.clear()
    wf.FAULTS.add("reject-charge")
    store = open_store(sqlite_db)
    try:
        assert store.get_instance(local).status is InstanceStatus.FORWARD_RECOVERY_REQUIRED  # type: ignore[union-attr]
        ops = Repairs(store, authority)
        result = dry_then_apply(ops, request(RepairKind.RETRY_STEP, local, seq=2))
        step = store.journal(local, store.get_instance(local).run).steps[2]  # type: ignore[union-attr, index]
        assert (step.status, step.attempt) == (StepStatus.RETRY_SCHEDULED, 2)
        assert store.get_instance(local).status is InstanceStatus.RUNNING  # type: ignore[union-attr]
        assert_one_applied_audit(store, local, result)
        drain(sqlite_db)  # the retried step passes; the charge is rejected: forward recovery
        effect = store.effects(local)[-1]
        assert effect.state is EffectState.FAILED
        wf.FAULTS.clear()
        dry_then_apply(ops, request(RepairKind.RETRY_STEP, local, seq=3))
        retried = store.effects(local)[-1]
        assert (retried.state, retried.attempt) == (EffectState.INTENDED, 2)
        assert retried.idempotency_key == effect.idempotency_key
    finally:
        store.close()
    drain(sqlite_db)
    with SyncEngine(sqlite_db, wf.registry) as engine:
        assert engine.result(local, timeout=0)["doubled"] == 8
    assert [a for a in wf.applied if a[0] == "charge"] == [("charge", effect.idempotency_key, 2)]


def test_skip_step_records_the_substitute_the_workflow_then_sees(
    sqlite_db: str, authority: Authority
) -> None:
    """Goal: a skipped step is COMPLETED with the recorded substitute, which replay returns.

    Method: a poison local step after a pivot is skipped with 21 (the charge then uses 21); a
    charge rejected for good is skipped with a waiver (the effect stays FAILED).
    """
    wf.FAULTS.update({"poison-step", "reject-charge"})
    instance_id = started(sqlite_db, "ship", "r-7", {"to": "bo", "amount": 4})
    drain(sqlite_db)
    store = open_store(sqlite_db)
    try:
        ops = Repairs(store, authority)
        dry_then_apply(ops, request(RepairKind.SKIP_STEP, instance_id, seq=2, result=21))
        wf.FAULTS.discard("poison-step")
        drain(sqlite_db)  # the charge of 21 is rejected for good: forward recovery again
        assert store.effects(instance_id)[-1].state is EffectState.FAILED
        waiver = {"waived": True, "by": "finance"}
        dry_then_apply(ops, request(RepairKind.SKIP_STEP, instance_id, seq=3, result=waiver))
        assert store.effects(instance_id)[-1].state is EffectState.FAILED
    finally:
        store.close()
    drain(sqlite_db)
    with SyncEngine(sqlite_db, wf.registry) as engine:
        outcome = engine.result(instance_id, timeout=0)
    assert outcome["doubled"] == 21
    assert outcome["receipt"] == waiver


def _failed_compensation(db: str, key: str) -> InstanceId:
    wf.FAULTS.add("reject-refund")
    instance_id = started(db, "pay", key, {"amount": 3, "fail_after": True})
    drain(db)
    wf.FAULTS.clear()
    return instance_id


def test_run_compensation_makes_a_failed_one_due_again(
    sqlite_db: str, authority: Authority
) -> None:
    """Goal: a failed compensation runs again under its own key and the instance compensates.

    Method: a refund rejected for good parks the instance (compensation_failed, parked from
    COMPENSATING); run-compensation -1 resumes COMPENSATING; a worker ends it COMPENSATED.
    """
    instance_id = _failed_compensation(sqlite_db, "r-8")
    store = open_store(sqlite_db)
    try:
        parked = store.get_instance(instance_id)
        assert parked is not None
        assert parked.reason_code == "compensation_failed"
        ops = Repairs(store, authority)
        result = dry_then_apply(ops, request(RepairKind.RUN_COMPENSATION, instance_id, seq=-1))
        comp = store.journal(instance_id, parked.run).effects[-1]  # type: ignore[index]
        assert (comp.state, comp.attempt) == (EffectState.INTENDED, 2)
        assert comp.idempotency_key.startswith("compensate:")
        assert store.get_instance(instance_id).status is InstanceStatus.COMPENSATING  # type: ignore[union-attr]
        assert_one_applied_audit(store, instance_id, result)
    finally:
        store.close()
    drain(sqlite_db)
    with SyncEngine(sqlite_db, wf.registry) as engine:
        assert engine.get(instance_id).status is InstanceStatus.COMPENSATED
    key = wf.applied[0][1]
    assert wf.applied == [("charge", key, 1), ("refund", f"compensate:{key}", 2)]


def test_skip_compensation_and_force_compensated(sqlite_db: str, authority: Authority) -> None:
    """Goal: a compensation settled by a person is SATISFIED with their evidence; a forced
    COMPENSATED is refused until every compensation is done.

    Method: failing refund parks the instance; force COMPENSATED is refused; skip-compensation
    -1 with evidence; a worker ends it COMPENSATED without refunding.
    """
    instance_id = _failed_compensation(sqlite_db, "r-9")
    store = open_store(sqlite_db)
    try:
        ops = Repairs(store, authority)
        force = request(RepairKind.FORCE_TERMINAL, instance_id, status=InstanceStatus.COMPENSATED)
        with pytest.raises(RepairRefusedError, match="not every compensation is done"):
            ops.apply(force)
        evidence = {"refunded_by": "cash desk", "receipt": "R-77"}
        dry_then_apply(
            ops, request(RepairKind.SKIP_COMPENSATION, instance_id, seq=-1, evidence=evidence)
        )
        [comp] = [e for e in store.effects(instance_id) if e.seq == -1]
        assert comp.state is EffectState.SATISFIED
        assert json.loads(comp.evidence or "") == evidence
    finally:
        store.close()
    drain(sqlite_db)
    with SyncEngine(sqlite_db, wf.registry) as engine:
        assert engine.get(instance_id).status is InstanceStatus.COMPENSATED
    assert wf.applied == [("charge", wf.applied[0][1], 1)]


def test_resume_and_force_failed(sqlite_db: str, authority: Authority) -> None:
    """Goal: resume goes back to where it was parked from; FAILED may be forced only once the
    ledger proves nothing happened.

    Method: resume a parked UNKNOWN (the plan warns; the worker parks it again, nothing is
    re-sent); resolve the effect as not applied without resuming; force FAILED.
    """
    instance_id = parked_unknown(sqlite_db, "r-10")
    store = open_store(sqlite_db)
    try:
        ops = Repairs(store, authority)
        resumed = dry_then_apply(ops, request(RepairKind.RESUME, instance_id))
        assert any("still UNKNOWN" in line for line in resumed.plan.describe())
        drain(sqlite_db)
        assert store.get_instance(instance_id).status is InstanceStatus.MANUAL_INTERVENTION  # type: ignore[union-attr]
        assert len(wf.applied) == 1
        ops.apply(
            request(
                RepairKind.RESOLVE_EFFECT,
                instance_id,
                seq=1,
                applied=False,
                evidence={"bank": "key unknown"},
            )
        )
        dry_then_apply(
            ops, request(RepairKind.FORCE_TERMINAL, instance_id, status=InstanceStatus.FAILED)
        )
        final = store.get_instance(instance_id)
        assert final is not None
        assert final.status is InstanceStatus.FAILED
        assert final.reason_code == "forced"
        assert "alice" in (final.reason or "")
    finally:
        store.close()


def test_cancel_is_audited_and_honoured(sqlite_db: str, authority: Authority) -> None:
    """Goal: cancel goes through the cancel request with its audit record; a worker honours it.

    Method: a waiting instance (charged, waiting for a signal) is cancelled with compensation; the
    request and the audit record are written together; a worker ends it CANCELLED, refunded.
    """
    instance_id = started(sqlite_db, "nap", "r-11", {"amount": 2})
    drain(sqlite_db)
    store = open_store(sqlite_db)
    try:
        assert store.get_instance(instance_id).status is InstanceStatus.WAITING  # type: ignore[union-attr]
        ops = Repairs(store, authority)
        result = dry_then_apply(ops, request(RepairKind.CANCEL, instance_id))
        record = store.get_instance(instance_id)
        assert record is not None
        assert record.cancel_requested_at is not None
        assert_one_applied_audit(store, instance_id, result)
        with pytest.raises(RepairRefusedError, match="exists already"):
            ops.apply(request(RepairKind.CANCEL, instance_id, compensate=False))
    finally:
        store.close()
    drain(sqlite_db)
    with SyncEngine(sqlite_db, wf.registry) as engine:
        assert engine.get(instance_id).status is InstanceStatus.CANCELLED
    assert [a[0] for a in wf.applied] == ["charge", "refund"]
