"""SIGKILL a real worker process between starting a compensating child and recording its
outcome: a fresh worker finishes the parent's saga with exactly one compensating instance."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

import child_compensation_world
import ledgerflow as lf
from ledgerflow.model.step import StepKind, StepStatus
from processes import TESTS, worker_process

WAIT_SECONDS_MAX = 60.0

pytestmark = pytest.mark.slow

POINTS = ["child.before_compensate", "child.after_compensate", "child.before_compensate_take"]


def _worker(
    url: str, log: Path, faults: list[dict[str, object]] | None = None
) -> subprocess.Popen[bytes]:
    options = ("--lease-seconds", "1", "--poll-seconds", "0.05")
    return worker_process(
        "child_compensation_world:registry",
        url,
        path=TESTS,
        log=log,
        options=options,
        faults=faults,
    )


@pytest.mark.parametrize("point", POINTS)
def test_a_worker_killed_around_the_compensating_start_leaves_one(
    journal_url: str, tmp_path: Path, point: str
) -> None:
    """Goal: whether the worker dies before the compensating child's start commit, after it,
    or before the parent takes its ending, recovery ends the parent COMPENSATED with one
    compensating instance (SUCCEEDED), its ending consumed once by the parent's negative
    position.

    Method: the instance is started here; a real ``ledgerflow worker`` process with a one-time
    ``kill`` rule at the point must die by SIGKILL; a second, unfaulted process finishes."""
    log = tmp_path / "workers.log"
    engine = lf.SyncEngine(journal_url, child_compensation_world.registry)
    try:
        started = engine.start("trip", key="trip-k", input=2)
        killed = _worker(journal_url, log, [{"point": point, "action": "kill"}])
        assert killed.wait(timeout=WAIT_SECONDS_MAX) == -signal.SIGKILL
        healthy = _worker(journal_url, log)
        try:
            ended = engine.wait(started.instance_id, timeout=WAIT_SECONDS_MAX)
        finally:
            healthy.terminate()
            healthy.wait(timeout=WAIT_SECONDS_MAX)
        assert ended.status is lf.InstanceStatus.COMPENSATED, ended.reason
        undoing = engine.list(workflow="unbook", limit=5)
        assert [u.business_key for u in undoing] == ["trip-k/r1/s1/child/compensate"]
        assert undoing[0].status is lf.InstanceStatus.SUCCEEDED
        detail = engine.detail(started.instance_id)
        [step] = [s for s in detail.steps if s.kind is StepKind.CHILD and s.seq < 0]
        assert step.status is StepStatus.COMPLETED
        taken = [d for d in detail.inbox if d.name == f"child:{undoing[0].instance_id}"]
        assert [(d.state.value, d.consumed_seq) for d in taken] == [("CONSUMED", -1)]
    finally:
        engine.close()
