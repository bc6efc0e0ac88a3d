"""SIGKILL the worker before each publication's step boundary commits: no reader ever sees the
value early, and after recovery each publication is there once.

``stages`` publishes "started", runs a step, publishes {"doubled": 42} and ends: the first
value commits with the step's result, the second with the ending. A real worker process
(``values_crash.py``) is killed after the step ran and before its commit, or before the
ending's commit; a reader with no code reads the store, then a fresh worker here recovers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from values_crash import registry

import ledgerflow as lf
from ledgerflow.testing.value_checks import values_published_with_their_steps

PROCESS_SECONDS_MAX = 60.0
KEY = "v-1"

pytestmark = pytest.mark.slow

# (point, what a reader sees while the instance waits for recovery: None, nothing yet).
POINTS: list[tuple[str, Any]] = [
    ("step.after_execute", None),
    ("instance.before_finish", ("started", 1)),
]


@pytest.mark.parametrize(("point", "seen"), POINTS, ids=[p for p, _ in POINTS])
def test_a_killed_worker_never_shows_a_value_before_its_step_commits(
    journal_url: str, point: str, seen: Any
) -> None:
    """Goal: a worker dead by SIGKILL after the step ran (or after the workflow returned) and
    before that commit leaves no trace of the pending publication; recovery publishes it once
    (version 2 in the end, not 3) and the oracle's value checks hold."""
    env = dict(os.environ)
    rule = {"point": point, "action": "kill", "match": {"instance": KEY}}
    env["LEDGERFLOW_FAULTS"] = json.dumps([rule])
    script = Path(__file__).parent / "values_crash.py"
    process = subprocess.run(
        [sys.executable, str(script), journal_url, KEY],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=PROCESS_SECONDS_MAX,
        check=False,
    )
    assert process.returncode == -9, "the worker was to die by SIGKILL at the point"

    async def read_then_recover() -> None:
        async with lf.Engine(journal_url, lf.Registry()) as reader:
            [instance] = await reader.list(limit=5)
            found = await reader.read(str(instance.instance_id), "stage")
            if seen is None:
                assert isinstance(found, lf.NotPublished)
            else:
                assert isinstance(found, lf.Published)
                assert (found.value, found.version) == seen
        async with lf.Engine(journal_url, registry) as engine:
            await engine.worker(poll_seconds=0.02).run(until_idle=True)
            iid = str(instance.instance_id)
            assert await engine.result(iid, timeout=10) == 42
            final = await engine.read(iid, "stage")
            assert isinstance(final, lf.Published)
            assert (final.value, final.version) == ({"doubled": 42}, 2)
            detail = await engine.detail(iid)
            values = {instance.instance_id: detail.values}
            steps = {instance.instance_id: detail.steps}
            assert list(values_published_with_their_steps(values, steps)) == []

    asyncio.run(read_then_recover())
