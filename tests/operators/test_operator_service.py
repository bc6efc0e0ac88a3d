"""The operators' service: the one front door the faces call, synchronous and asynchronous.

``Operations`` (the CLI's, the HTTP endpoint's) and ``AsyncOperations`` (on an engine's store,
for asyncio code) must give the same answers, since they are the same calls: each reads the
attention queue, shows an instance with its audit and flags, plans and applies a repair and
lists the audit log. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import repair_workflows as wf
from repair_workflows import drain, parked_unknown

from ledgerflow import Engine, InstanceStatus
from ledgerflow.errors import InstanceNotFoundError, StoreNotFoundError
from ledgerflow.operators.async_service import AsyncOperations
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.service import AuditQuery, Operations, RepairKind, RepairRequest

pytestmark = pytest.mark.usefixtures("repair_faults")


def test_both_services_answer_alike_and_repair_through_the_audit(
    journal_url: str, authority: Authority
) -> None:
    """Goal: what needs a person, an instance's report and the audit log read the same from
    both services, and a repair applied through the asynchronous one is on the same record.

    Method: park an instance (a lost reply: its effect is UNKNOWN); the synchronous service
    lists it in the queue with the effect in doubt and shows it with no audit yet; the
    asynchronous service, on an engine over the same journal, gives equal answers, plans the
    resolve-effect (nothing written) and applies it; both then list the one audit record, and
    a worker finishes the instance.
    """
    instance_id = parked_unknown(journal_url, "svc-1")
    request = RepairRequest(
        kind=RepairKind.RESOLVE_EFFECT,
        instance_id=instance_id,
        seq=1,
        applied=True,
        evidence={"source": "bank statement"},
        resume=True,
        actor="alice",
        reason="the bank shows the charge",
    )
    with Operations(journal_url, authority=authority) as operations:
        [item] = operations.attention()
        assert (item.kind, item.instance_id, item.reason_code) == (
            "parked",
            instance_id,
            "effect_outcome_unknown",
        )
        assert len(item.effects_in_doubt) == 1
        report = operations.show(instance_id)
        assert (report.audit, report.flags) == ([], [])
        assert [r.instance_id for r in operations.list()] == [instance_id]

        async def asynchronously() -> None:
            async with Engine(journal_url, wf.registry) as engine:
                ops = AsyncOperations(engine, authority=authority)
                assert await ops.attention() == [item]
                assert await ops.show(instance_id) == report
                assert await ops.list() == operations.list()
                planned = await ops.plan(request)
                assert planned.outcome == "dry-run"
                assert await ops.audit() == []
                applied = await ops.apply(request)
                assert applied.outcome == "applied"
                [record] = await ops.audit(AuditQuery(instance_id=instance_id))
                assert record.audit_id == applied.audit_id

        asyncio.run(asynchronously())
        assert [r.audit_id for r in operations.audit()] == [1]
        assert operations.show(instance_id).audit == operations.audit()
        assert operations.attention() == []
    drain(journal_url)
    with Operations(journal_url) as operations:
        assert operations.wait(instance_id, timeout=0).status is InstanceStatus.SUCCEEDED


def test_the_service_opens_a_journal_as_it_is(tmp_path: Path) -> None:
    """Goal: an operator's service never creates a journal: a mistyped path is an error naming
    it (LF205), and no file appears; a server's service (migrate=None) creates its own.

    Method: open the service on a path that does not exist, then with migrate=None.
    """
    missing = tmp_path / "typo.db"
    with pytest.raises(StoreNotFoundError, match=r"typo\.db"):
        Operations(f"sqlite:///{missing}")
    assert not missing.exists()
    made = f"sqlite:///{tmp_path / 'made.db'}"
    with Operations(made, migrate=None) as operations, pytest.raises(InstanceNotFoundError):
        operations.show("wf_nothing")
