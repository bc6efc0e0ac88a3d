"""End to end with real processes: a lost reply at a participant that has neither a lookup nor
deduplication, settled by an operator through the ``ledgerflow`` CLI as a subprocess.

The participant runs in its own service process over HTTP and keeps its own ledger; workers are
``ledgerflow worker`` processes (the first is SIGKILLed right after dispatch, so the reply is
lost). The operator reads the participant's own ledger as evidence, resolves the effect as
applied with ``--resume``, and a fresh worker finishes the instance. The participant applied
the effect exactly once, and the workflow's result carries the evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from authority_files import granting
from ledgerflow import EffectState, InstanceStatus, SyncEngine
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.operators.service import local_actor
from processes import LEDGERFLOW, Service, Workers, running_service

FAULTS_FOLDER = Path(__file__).resolve().parents[1] / "faults"
sys.path.insert(0, str(FAULTS_FOLDER))

from fault_workflows import registry  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path / "participants", ["legacy:none"]) as s:
        yield s


@pytest.fixture
def workers(tmp_path: Path, service: Service) -> Workers:
    return Workers.in_folder(
        tmp_path, service, target="fault_workflows:registry", path=FAULTS_FOLDER
    )


def _ledgerflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LEDGERFLOW, *args], env=env, capture_output=True, text=True, timeout=60)


def test_operator_resolves_a_lost_reply_with_the_participants_ledger(
    tmp_path: Path, workers: Workers
) -> None:
    """Goal: an effect whose reply was lost is settled by an operator's evidence, and the
    instance finishes with it, the participant having applied it exactly once.

    Method: kill the worker after dispatch; a fresh worker parks the instance
    (effect_outcome_unknown); the operator's CLI (a subprocess) first does a dry run, then
    resolves with the participant's ledger row and --resume; a fresh worker finishes it.
    """
    with SyncEngine(workers.db_url, registry) as engine:
        instance_id = engine.start("legacy", key="op-1", input={"n": 3}).instance_id
    workers.killed_at([{"point": "effect.after_dispatch", "action": "kill", "match": {"seq": 1}}])
    workers.recover()
    with SyncEngine(workers.db_url, registry) as engine:
        record = engine.get(instance_id)
        assert record.status is InstanceStatus.MANUAL_INTERVENTION
        assert record.reason_code == "effect_outcome_unknown"
        [effect] = engine.detail(instance_id).effects
        assert effect.state is EffectState.UNKNOWN
    [row] = workers.service.applied("legacy", effect.idempotency_key)

    # Who runs the command (local:ACCOUNT) may resolve an effect.
    policy = granting(tmp_path, "resolve-effect")
    env = {**os.environ, "LEDGERFLOW_AUTHORITY": policy}
    args = [
        *("repair", "resolve-effect", instance_id, "1", "--applied", "--resume"),
        *("--evidence", json.dumps(row), "--reason", "legacy ledger shows it applied"),
        *("--db", workers.db_url, "--json"),
    ]
    dry = _ledgerflow(*args, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["outcome"] == "dry-run"
    done = _ledgerflow(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "applied"

    workers.recover()
    with SyncEngine(workers.db_url, registry) as engine:
        assert engine.result(instance_id, timeout=0) == {"receipt": row}
        [audit] = engine.store.audit_records(AuditQuery(instance_id=instance_id))
        assert (audit.actor, audit.role, audit.outcome) == (local_actor(), "granted", "applied")
    assert workers.service.received_count("legacy", effect.idempotency_key) == 1
    assert workers.service.applied_count("legacy", effect.idempotency_key) == 1
