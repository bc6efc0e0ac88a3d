"""SIGKILL the worker between every pair of writes of the child protocol: one child per
parent position, its ending kept once, and the parent's result as if nothing happened.

The writes are: the start (the parent's CHILD step, the child and its link, one transaction);
the child's ending together with its event in the parent's inbox; the parent taking that event
(closing its step); the parent's own ending. A real worker process (``children_crash.py``,
which installs ``LEDGERFLOW_FAULTS`` itself) is killed at the named point before or after each
one; a fresh worker in this process recovers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from children_crash import registry

import ledgerflow as lf
from ledgerflow.model.step import StepKind, StepStatus

PROCESS_SECONDS_MAX = 60.0

pytestmark = pytest.mark.slow

KEY = "p-1"
CHILD_KEY = f"{KEY}/r1/s1/child"

# (point, match): each a place between two of the protocol's writes.
POINTS = [
    ("child.before_start", {"instance": KEY}),
    ("child.after_start", {"instance": KEY}),
    ("instance.after_claim", {"instance": CHILD_KEY}),
    ("instance.before_finish", {"instance": CHILD_KEY}),
    ("child.before_take", {"instance": KEY}),
    ("instance.before_finish", {"instance": KEY}),
]


@pytest.mark.parametrize(
    ("point", "match"), POINTS, ids=[f"{p}-{m['instance']}" for p, m in POINTS]
)
def test_a_killed_worker_leaves_one_child_and_the_parent_finishes(
    journal_url: str, point: str, match: dict[str, str]
) -> None:
    """Goal: whichever write of the child protocol the worker dies before or after, recovery
    ends the parent SUCCEEDED with the child's result; one child was ever started; its ending
    is in the parent's inbox once, consumed by the parent's step.

    Method: spawn the worker process with a one-time ``kill`` rule at the point; it must die
    by SIGKILL (-9). A fresh engine and worker here run until idle.
    """
    env = dict(os.environ)
    env["LEDGERFLOW_FAULTS"] = json.dumps([{"point": point, "action": "kill", "match": match}])
    script = Path(__file__).parent / "children_crash.py"
    process = subprocess.run(
        [sys.executable, str(script), journal_url, KEY],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=PROCESS_SECONDS_MAX,
        check=False,
    )
    assert process.returncode == -9, "the worker was to die by SIGKILL at the point"

    async def recover() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            await engine.worker(poll_seconds=0.02).run(until_idle=True)
            [parent] = await engine.list(workflow="parent", limit=5)
            assert await engine.result(parent.instance_id, timeout=10) == {"total": 41}
            kids = await engine.list(workflow="kid", limit=5)
            assert [k.business_key for k in kids] == [CHILD_KEY]
            assert kids[0].parent_instance_id == parent.instance_id
            detail = await engine.detail(parent.instance_id)
            [step] = [s for s in detail.steps if s.kind is StepKind.CHILD]
            assert step.status is StepStatus.COMPLETED
            endings = [d for d in detail.inbox if d.name == f"child:{kids[0].instance_id}"]
            assert [(d.state.value, d.consumed_seq) for d in endings] == [("CONSUMED", 1)]

    asyncio.run(recover())
