"""A SIGKILL during group commits loses no acknowledged step and finishes every instance once.

A worker process drives many instances at once, so their commits share group transactions,
and dies by SIGKILL: at a named point just before a group's transaction, just after one is
durable but before anyone is answered, or from outside while commits are flowing. Every step
the process acknowledged (noted by the workflow only after ``ctx.step`` returned, with a value
that differs on every execution) must be on the journal with that very value after a fresh
worker recovers; every instance must end SUCCEEDED, exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from group_commit_crash import NOTES_VARIABLE, STEPS, registry

import ledgerflow as lf
from ledgerflow.model.ids import InstanceId, RunNumber, StepSeq

INSTANCES = 120
PROCESS_SECONDS_MAX = 60.0
RECOVERY_SECONDS_MAX = 60.0
# For the kill from outside: this many acknowledged steps first, so commits are flowing.
NOTES_BEFORE_KILL = 150


def _notes(path: Path) -> list[tuple[str, int, str]]:
    if not path.exists():
        return []
    rows = []
    # Only whole lines: a reader may see the worker's append half done, and a kill may leave
    # one half written (that note was never finished, so it claims nothing).
    for line in path.read_text().split("\n")[:-1]:
        instance_id, seq, value = line.split()
        rows.append((instance_id, int(seq), value))
    return rows


def _spawn(
    db_url: str, notes: Path, plan: list[dict[str, object]], concurrency: int
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env[NOTES_VARIABLE] = str(notes)
    env["LEDGERFLOW_FAULTS"] = json.dumps(plan)
    script = Path(__file__).parent / "group_commit_crash.py"
    return subprocess.Popen(
        [sys.executable, str(script), db_url, str(INSTANCES), str(concurrency)],
        env=env,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kill_when_noted(process: subprocess.Popen[str], notes: Path) -> None:
    deadline = time.monotonic() + PROCESS_SECONDS_MAX
    while len(_notes(notes)) < NOTES_BEFORE_KILL:
        assert process.poll() is None, "the worker ended before it could be killed"
        assert time.monotonic() < deadline, "the worker made no progress"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)


async def _recover(db_url: str) -> None:
    async with lf.Engine(db_url, registry) as engine:
        await engine.worker(concurrency=INSTANCES, poll_seconds=0.05).run(until_idle=True)


pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("fault", "concurrency"),
    [
        ({"point": "commit.before_group", "action": "kill", "match": {"group": 4}}, INSTANCES),
        # Every instance commits 4 times, one after another, so group 4 always happens (how
        # many more depends on timing: faster groups take more commits each).
        ({"point": "commit.after_group", "action": "kill", "match": {"group": 4}}, INSTANCES),
        ({"point": "start.after_group", "action": "kill", "match": {"group": 1}}, INSTANCES),
        (None, INSTANCES),  # killed from outside while commits flow
        # One instance at a time: every commit is alone (on SQLite, applied on the loop's thread).
        ({"point": "commit.before_group", "action": "kill", "match": {"group": 5}}, 1),
        ({"point": "commit.after_group", "action": "kill", "match": {"group": 7}}, 1),
    ],
    ids=[
        "before-group",
        "after-group-before-answer",
        "after-start-group",
        "external",
        "alone-before-commit",
        "alone-after-commit-before-answer",
    ],
)
def test_sigkill_during_group_commit_loses_no_acknowledged_step(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: dict[str, object] | None,
    concurrency: int,
) -> None:
    db_url = f"sqlite:///{tmp_path}/journal.db"
    notes = tmp_path / "notes.txt"
    monkeypatch.setenv(NOTES_VARIABLE, str(notes))  # The recovery in this process notes too.
    process = _spawn(db_url, notes, [fault] if fault else [], concurrency)
    try:
        if fault is None:
            _kill_when_noted(process, notes)
        assert process.wait(timeout=PROCESS_SECONDS_MAX) == -signal.SIGKILL
    finally:
        # A failed assertion must not leave the worker running into the next test.
        if process.poll() is None:
            process.kill()
            process.wait()
    acknowledged = _notes(notes)

    asyncio.run(asyncio.wait_for(_recover(db_url), timeout=RECOVERY_SECONDS_MAX))

    with lf.SyncEngine(db_url, registry) as engine:
        instances = engine.list(workflow="noted", limit=INSTANCES + 1)
        assert len(instances) == INSTANCES
        assert {i.status for i in instances} == {lf.InstanceStatus.SUCCEEDED}
        for instance in instances:
            ends = [
                e
                for e in engine.store.timeline(instance.instance_id)
                if e.subject == "instance" and e.to_state == "SUCCEEDED"
            ]
            assert len(ends) == 1, f"{instance.instance_id} finished {len(ends)} times"
        journaled: dict[str, dict[int, str | None]] = defaultdict(dict)
        for instance in instances:
            steps = engine.store.journal(InstanceId(instance.instance_id), RunNumber(1)).steps
            assert sorted(steps) == [StepSeq(s) for s in range(1, STEPS + 1)]
            for seq, step in steps.items():
                assert step.status is lf.StepStatus.COMPLETED
                journaled[instance.instance_id][seq] = step.output
    # Each step acknowledged before the kill is on the journal with the value the workflow saw.
    for instance_id, seq, value in acknowledged:
        assert journaled[instance_id][seq] == json.dumps(value), (instance_id, seq)
    # And the workflow went on from the journal: nothing it saw afterwards contradicts it.
    for instance_id, seq, value in _notes(notes):
        assert journaled[instance_id][seq] == json.dumps(value), (instance_id, seq)
