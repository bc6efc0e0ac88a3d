"""``on_parent_end="wait"`` on every final ending of the parent: a parent that fails (clean, or
after compensating), is cancelled, or is ended by an operator records its ending only after
each of its "wait" children ended; until then it is WAITING on their endings, durably.

Every test runs on a real SQLite file and on PostgreSQL (``journal_url``) with real workers
(``until_idle``); the kill test SIGKILLs a real worker process.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
import wait_policy_workflows as shop
from ledgerflow.errors import RepairRefusedError, WaitChildrenLiveError, WorkflowError
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey, InstanceId
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.model.repair import RepairKind
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.repairs import RepairRequest
from ledgerflow.operators.service import Operations
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.testing import child_checks, oracle, replay_history
from ledgerflow.testing.oracle import Snapshot
from processes import TESTS, WAIT_SECONDS_MAX, worker_process


async def _work(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_idle=True)


def _ended_at(detail: lf.InstanceDetail) -> float:
    """When the instance reached its final status (its timeline's entry)."""
    [entry] = [
        e
        for e in detail.timeline
        if e.subject == "instance" and e.to_state in {s.value for s in FINAL_STATUSES}
    ]
    return entry.at


def _history(url: str, instance_id: str) -> dict[str, Any]:
    with Operations(url) as operations:
        return operations.export(InstanceId(instance_id))


async def _child_of(engine: lf.Engine, parent: str) -> lf.InstanceRecord:
    [child] = (await engine.detail(parent)).children
    return child


async def _ends_after_its_child(engine: lf.Engine, parent: str) -> dict[str, Any]:
    """The parent is still not ended while its "wait" child is live; released, the child
    ends first, then the parent, whose CHILD step holds the child's outcome."""
    child = await _child_of(engine, parent)
    assert child.status is lf.InstanceStatus.WAITING
    record = await engine.get(parent)
    assert record.status is lf.InstanceStatus.WAITING, record.reason
    assert "child" in (record.reason or "")
    await engine.signal(child.instance_id, "release", event_id="r-1")
    await _work(engine)
    assert (await engine.get(child.instance_id)).status is lf.InstanceStatus.SUCCEEDED
    parent_detail = await engine.detail(parent)
    assert _ended_at(parent_detail) >= _ended_at(await engine.detail(child.instance_id))
    [step] = [s for s in parent_detail.steps if s.kind is StepKind.CHILD]
    assert step.status is StepStatus.COMPLETED
    assert step.output_value["status"] == "SUCCEEDED"
    assert step.output_value["result"] == "released"
    assert child_checks.no_parent_ends_before_its_wait_children(Snapshot.of(engine.store)) == []
    return step.output_value


@pytest.mark.parametrize(
    ("charged", "ending"),
    [(False, lf.InstanceStatus.FAILED), (True, lf.InstanceStatus.COMPENSATED)],
    ids=["failed", "compensated"],
)
def test_a_failing_parent_ends_only_after_its_wait_child(
    journal_url: str, charged: bool, ending: lf.InstanceStatus
) -> None:
    """Goal: a business failure of the parent (FAILED, or COMPENSATED after undoing its
    charge) is recorded only once its "wait" child ended, with the child's outcome journaled.

    Method: the parent starts a child that waits for a signal, then raises its failure; run
    until idle: the parent is WAITING (nothing of the failure recorded, its charge not yet
    refunded), the child too. Release the child and run again: the failure is decided again on
    replay, the wait resumes and takes the child's ending, then the parent ends.
    """
    shop.applied.clear()
    histories: list[dict[str, Any]] = []

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            parent = await engine.start("fails", key=f"f-{charged}", input=charged)
            await _work(engine)
            assert sum(shop.applied.values()) == (1 if charged else 0), "nothing undone yet"
            histories.append(_history(journal_url, parent.instance_id))
            await _ends_after_its_child(engine, parent.instance_id)
            histories.append(_history(journal_url, parent.instance_id))
            with pytest.raises(WorkflowError) as raised:
                await engine.result(parent.instance_id, timeout=10)
            assert raised.value.status == ending.value
            assert "refused after starting its child" in (raised.value.cause or "")
            # Charged once, refunded once (after the child's ending).
            assert sum(shop.applied.values()) == (2 if charged else 0)

    asyncio.run(main())
    # Both histories, waiting and ended, replay clean on the same code.
    for history in histories:
        verdict = replay_history(shop.registry, history)
        assert verdict.compatible, verdict


def test_a_cancelled_parent_ends_only_after_its_wait_child(journal_url: str) -> None:
    """Goal: a cancel request on the parent does not cancel its "wait" child (only "cancel"
    children are asked) and the parent's CANCELLED comes after the child's ending.

    Method: the parent starts a "wait" child and waits for a signal; cancel the parent and run
    until idle: it is WAITING, not CANCELLING, and the child has no cancel request. Released,
    the child succeeds; the parent then ends CANCELLED.
    """

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            parent = await engine.start("waits", key="c-1")
            await _work(engine)
            await engine.cancel(parent.instance_id, reason="customer left")
            await _work(engine)
            child = await _child_of(engine, parent.instance_id)
            assert child.cancel_requested_at is None
            histories.append(_history(journal_url, parent.instance_id))
            await _ends_after_its_child(engine, parent.instance_id)
            assert (await engine.get(parent.instance_id)).status is lf.InstanceStatus.CANCELLED
            histories.append(_history(journal_url, parent.instance_id))

    histories: list[dict[str, Any]] = []
    asyncio.run(main())
    for history in histories:
        verdict = replay_history(shop.registry, history)
        assert verdict.compatible, verdict


def test_a_parked_parent_keeps_its_wait_child_and_a_forced_ending_is_refused(
    journal_url: str, tmp_path: Path
) -> None:
    """Goal: a park is no ending: a parent parked by a defect leaves its "wait" child running;
    an operator forcing it FAILED is refused with a typed error naming the live child (audited),
    and applied once the child ended.

    Method: the parent starts a "wait" child then hits a defect (MANUAL_INTERVENTION). Force
    FAILED: WaitChildrenLiveError (a RepairRefusedError) with the child's id; the refusal is in
    the audit log. Release the child; the same repair then applies.
    """

    async def run(release: str | None = None) -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            if release is None:
                await engine.start("breaks", key="b-1")
            else:
                await engine.signal(release, "release", event_id="r-1")
            await _work(engine)

    asyncio.run(run())
    policy = tmp_path / "authority.toml"
    policy.write_text('[roles]\noperator = ["force-terminal"]\n[actors]\nalice = ["operator"]\n')
    parent = InstanceId(instance_id_for(DEFAULT_TENANT, "breaks", BusinessKey("b-1")))
    request = RepairRequest(
        kind=RepairKind.FORCE_TERMINAL,
        instance_id=parent,
        actor="alice",
        reason="ticket OPS-26",
        status=lf.InstanceStatus.FAILED,
    )
    with Operations(journal_url, authority=Authority.from_file(policy)) as operations:
        detail = operations.detail(parent)
        assert detail.instance.status is lf.InstanceStatus.MANUAL_INTERVENTION
        [child] = detail.children
        assert child.status is lf.InstanceStatus.WAITING
        with pytest.raises(WaitChildrenLiveError) as refused:
            operations.apply(request)
        assert isinstance(refused.value, RepairRefusedError)
        assert refused.value.children == (child.instance_id,)
        assert child.instance_id in refused.value.message
        assert operations.detail(parent).instance.status is lf.InstanceStatus.MANUAL_INTERVENTION
        [audit] = operations.audit(AuditQuery(instance_id=parent))
        assert audit.outcome == "refused"
    asyncio.run(run(release=child.instance_id))
    with Operations(journal_url, authority=Authority.from_file(policy)) as operations:
        assert operations.detail(child.instance_id).instance.status is lf.InstanceStatus.SUCCEEDED
        assert operations.apply(request).outcome == "applied"
        assert operations.detail(parent).instance.status is lf.InstanceStatus.FAILED


# -- a worker process SIGKILLed while the failing parent waits for its child -------------------

KEY = "kill-1"
KILLS = {
    # Before the failing parent's first WAITING commit (its child already started).
    "before the parent parks": {"point": "wait.before_suspend", "match": {"instance": KEY}},
    # The child ended; the parent, failing again on replay, is about to take its ending.
    "before the parent takes the ending": {
        "point": "child.before_take",
        "match": {"instance": KEY},
    },
}


def _worker(url: str, log: Path, faults: list[dict[str, Any]] | None = None) -> Any:
    options = ("--lease-seconds", "1", "--poll-seconds", "0.01", "--until-idle")
    return worker_process(
        "wait_policy_workflows:registry", url, path=TESTS, log=log, options=options, faults=faults
    )


def _finish(url: str, log: Path) -> None:
    code = _worker(url, log).wait(timeout=WAIT_SECONDS_MAX)
    assert code == 0, log.read_text()[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kill", list(KILLS))
def test_a_worker_killed_while_the_failing_parent_waits_finishes_both_once(
    journal_url: str, tmp_path: Path, kill: str
) -> None:
    """Goal: the wait of a failing parent is durable: SIGKILL the worker process around it and
    a fresh worker ends the child once and the parent FAILED once, after the child.

    Method: a real ``ledgerflow worker`` process dies by SIGKILL at the named point; fresh
    worker processes (``--until-idle``) take over once its lease lapses. Then the ledgers: one
    child, its ending delivered once and consumed by the parent's step, one FAILED entry on the
    parent's timeline, later than the child's ending, and the explorer's oracle clean.
    """
    log = tmp_path / "workers.log"
    outside = lf.SyncEngine(journal_url, shop.registry)
    try:
        parent = outside.start("fails", key=KEY, input=False).instance_id
        rule = {**KILLS[kill], "action": "kill"}
        if rule["point"] == "child.before_take":
            _finish(journal_url, log)
            [child] = outside.detail(parent).children
            outside.signal(child.instance_id, "release", event_id="r-1")
        killed = _worker(journal_url, log, faults=[rule])
        assert killed.wait(timeout=WAIT_SECONDS_MAX) == -signal.SIGKILL, log.read_text()[-3000:]
        assert outside.get(parent).status not in FINAL_STATUSES
        _finish(journal_url, log)
        [child] = outside.detail(parent).children
        if outside.get(child.instance_id).status is lf.InstanceStatus.WAITING:
            assert outside.get(parent).status is lf.InstanceStatus.WAITING
            outside.signal(child.instance_id, "release", event_id="r-1")
            _finish(journal_url, log)
        detail = outside.detail(parent)
        assert detail.instance.status is lf.InstanceStatus.FAILED, detail.instance.reason
        assert outside.get(child.instance_id).status is lf.InstanceStatus.SUCCEEDED
        assert _ended_at(detail) >= _ended_at(outside.detail(child.instance_id))
        endings = [d for d in detail.inbox if d.name == f"child:{child.instance_id}"]
        assert len(endings) == 1
        assert endings[0].state.value == "CONSUMED"
        [step] = [s for s in detail.steps if s.kind is StepKind.CHILD]
        assert json.loads(step.output or "{}")["status"] == "SUCCEEDED"
        assert len(outside.list(workflow="hold", limit=10)) == 1
        snapshot = Snapshot.of(outside.store)
        found = [
            *child_checks.no_parent_ends_before_its_wait_children(snapshot),
            *oracle.child_endings_reach_their_parent(snapshot),
        ]
        assert found == []
    finally:
        outside.close()
