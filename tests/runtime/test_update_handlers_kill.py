"""SIGKILL the worker while a declared handler answers an update under a wait: the reply is
published once and the update is applied once, whatever the point.

``tally`` waits for "go"; its handler for "add" runs a step. A real worker process
(``update_crash.py``) is killed after the handler's step ran and before its commit, after that
commit and before the reply's, or after the reply's commit and before the wait parks. A fresh
worker here recovers: the caller asking again gets the one reply, "go" ends the wait, and
the result counts the update once.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from update_crash import registry

import ledgerflow as lf
from ledgerflow.testing.value_checks import updates_answered_once

PROCESS_SECONDS_MAX = 60.0
KEY = "t-1"

pytestmark = pytest.mark.slow

POINTS = ["step.after_execute", "update.before_reply", "wait.before_suspend"]


@pytest.mark.parametrize("point", POINTS)
def test_a_killed_worker_answers_an_update_once(journal_url: str, point: str) -> None:
    """Goal: a worker dead by SIGKILL at each point of handling an update leaves no half
    answer; recovery publishes one reply (the caller asking again gets it), applies the
    update once (the result is 1 + 2 * 5), and the oracle's update check holds."""
    env = dict(os.environ)
    env["LEDGERFLOW_FAULTS"] = json.dumps(
        [{"point": point, "action": "kill", "match": {"instance": KEY}}]
    )
    script = Path(__file__).parent / "update_crash.py"
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
            [instance] = await engine.list(limit=5)
            iid = str(instance.instance_id)
            worker = asyncio.create_task(engine.worker(poll_seconds=0.02).run())
            try:
                assert await engine.update(iid, "add", 5, update_id="u-1", timeout=20) == 11
                await engine.signal(iid, "go", event_id="go-1")
                assert await engine.result(iid, timeout=20) == 11
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
            detail = await engine.detail(iid)
            names = [s.name for s in detail.steps]
            assert names.count("take:update:add") == 1
            assert names.count("publish:update:u-1") == 1
            found = updates_answered_once(
                [detail.instance],
                {instance.instance_id: detail.inbox},
                {instance.instance_id: detail.steps},
            )
            assert list(found) == []

    asyncio.run(recover())
