"""The defect recipe end to end, with real processes: a defect parks, the fix is deployed under
a new fingerprint, the instance is upgraded and resumed through the ``ledgerflow`` CLI, and a
worker with the fixed code finishes it.

The payment participant runs in its own service process and keeps its own ledger of what it
applied by idempotency key; workers are ``ledgerflow worker`` processes loading one of two
editions of the same workflow (``transfer`` v1): the broken one raises a ``NameError`` after the
charge is confirmed, the fixed one does not. The two files differ in the workflow function, so
the fixed code has another fingerprint of the same workflow and version. Every command is the
one docs/versioning.md tells a user to run.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from authority_files import granting
from ledgerflow import InstanceStatus, SyncEngine
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.defects import WORKFLOW_DEFECT
from ledgerflow.model.definition import Registry
from ledgerflow.operators.service import local_actor
from processes import LEDGERFLOW, Service, Workers, child_environment, running_service

pytestmark = pytest.mark.slow

EDITION = '''"""transfer v1, {edition} (written by the defect recipe's test)."""

from datetime import timedelta
from typing import Any

from ledgerflow import Registry, RetryPolicy, WorkflowContext
from remote_cast import declare

FAST = RetryPolicy(attempts_max=4, backoff_initial=timedelta(milliseconds=20))
DEFECTS = RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=20))

registry = Registry()
payment = declare(
    registry,
    "payment:dedupe",
    operations={{"charge": "compensatable"}},
    compensations={{"charge": "refund"}},
    retry=FAST,
)


@registry.workflow(name="transfer", version=1, defect_retry=DEFECTS)
async def transfer(ctx: WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    receipt = await ctx.effect(payment.effects["charge"], {{"amount": order["amount"]}})
    return {{"receipt": receipt, "line": {line}}}
'''
BROKEN = 'currency_symbol + str(order["amount"])'  # NameError: the defect under test
FIXED = '"EUR " + str(order["amount"])'


def _edition(folder: Path, name: str, line: str) -> Registry:
    path = folder / f"{name}.py"
    path.write_text(EDITION.format(edition=name, line=line))
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry: Registry = module.registry
    return registry


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", ["payment:dedupe"]) as s:
        yield s


def test_a_parked_defect_is_upgraded_to_the_fix_and_resumed(
    tmp_path: Path, journal_url: str, service: Service
) -> None:
    """Goal: the recipe for a workflow defect works as written: the charge is applied once,
    nothing is refunded, and the instance ends SUCCEEDED on the fixed code.

    Method: a worker with the broken edition parks the instance ``workflow_defect`` after the
    bounded retries; ``ledgerflow versions upgrade transfer@1 transfer_fixed:registry`` moves
    it to the fixed code's fingerprint (a dry run first, which moves nothing); ``ledgerflow repair
    resume`` resumes it; a worker with the fixed edition finishes it. The participant's own
    ledger holds one charge and no refund; the audit log holds the upgrade, with the replay's
    evidence, and the resume.
    """
    code = tmp_path / "code"
    code.mkdir()
    broken = _edition(code, "transfer_broken", BROKEN)
    fixed = _edition(code, "transfer_fixed", FIXED)
    old, new = broken.get("transfer", 1).fingerprint, fixed.get("transfer", 1).fingerprint
    assert old != new

    def workers(target: str) -> Workers:
        return Workers(
            db_url=journal_url,
            service=service,
            log=tmp_path / "workers.log",
            target=target,
            path=code,
        )

    # Who runs the commands (local:ACCOUNT) may resume and upgrade.
    policy = granting(tmp_path, "resume", "upgrade")
    env = child_environment(code, LEDGERFLOW_AUTHORITY=policy)

    def ledgerflow(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*LEDGERFLOW, *args, "--db", journal_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    with SyncEngine(journal_url, broken) as engine:
        instance_id = engine.start("transfer", key="t-1", input={"amount": 10}).instance_id
    workers("transfer_broken:registry").recover()
    with SyncEngine(journal_url, broken) as engine:
        parked = engine.get(instance_id)
        [charge] = engine.detail(instance_id).effects
    assert parked.status is InstanceStatus.MANUAL_INTERVENTION, parked.reason
    assert parked.reason_code == WORKFLOW_DEFECT
    assert "NameError" in (parked.reason or "")
    assert old in (parked.reason or "")
    assert parked.fingerprint == old
    assert service.applied_count("payment", charge.idempotency_key) == 1
    assert [row["key"] for row in service.ledger("payment")["applied"]] == [charge.idempotency_key]

    # The recipe: see which instances, then upgrade (dry run first) and resume.
    listed = ledgerflow("attention", "--reason", WORKFLOW_DEFECT)
    assert instance_id in listed.stdout
    # As the recipe types it: the fingerprint is the one the fixed registry's code has.
    upgrade: tuple[str, ...] = ("versions", "upgrade", "transfer@1", "transfer_fixed:registry")
    dry = ledgerflow(*upgrade, "--dry-run")
    assert "1 would move, 0 left pinned" in dry.stdout, dry.stdout
    with SyncEngine(journal_url, broken) as engine:
        assert engine.get(instance_id).fingerprint == old
    moved = json.loads(ledgerflow(*upgrade, "--json").stdout)
    assert [(o["instance_id"], o["outcome"]) for o in moved["outcomes"]] == [(instance_id, "moved")]
    resume = ("repair", "resume", instance_id, "--reason", "fixed in release 42")
    ledgerflow(*resume, "--dry-run")
    ledgerflow(*resume)

    workers("transfer_fixed:registry").recover()
    with SyncEngine(journal_url, fixed) as engine:
        done = engine.get(instance_id)
        assert done.status is InstanceStatus.SUCCEEDED, done.reason
        assert done.fingerprint == new
        assert engine.result(instance_id, timeout=0)["line"] == "EUR 10"
        [effect] = engine.detail(instance_id).effects
        audit = engine.store.audit_records(AuditQuery(instance_id=instance_id))
    assert (effect.effect_id, effect.idempotency_key) == (charge.effect_id, charge.idempotency_key)
    assert service.applied_count("payment", charge.idempotency_key) == 1
    assert [row["key"] for row in service.ledger("payment")["applied"]] == [charge.idempotency_key]
    kinds = [(a.kind, a.actor, a.outcome) for a in audit]
    assert ("upgrade", local_actor(), "applied") in kinds
    assert ("resume", local_actor(), "applied") in kinds
    [upgraded] = [a for a in audit if a.kind == "upgrade"]
    evidence = json.loads(upgraded.evidence or "{}")
    assert evidence["compatible"] is True
    assert evidence["fingerprint"] == new
    assert evidence["replayed"] >= 1
