"""Poison and stuck work with real processes: workers SIGKILLed by a poison step, and a
participant service that accepts a request and does not answer.

Worker processes run ``ledgerflow worker`` against a SQLite journal; they are restarted by the
test in a bounded loop, as a supervisor would. Waits are bounded waits on conditions in the
ledger, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from detection_workflows import BANK, attempts, charge_registry, registry

from conditions import until
from ledgerflow import Engine, InstanceStatus, SyncEngine
from ledgerflow.model import detection
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.testing import FakeClock
from processes import LEDGERFLOW, child_environment, running_service

pytestmark = pytest.mark.slow

HEALTHY = 100
WORKER_LIVES_MAX = 12
WAIT_SECONDS_MAX = 60.0


def _worker(db_url: str, log: Path, *, concurrency: int) -> subprocess.Popen[bytes]:
    env = child_environment(Path(__file__).parent)
    command = [
        *LEDGERFLOW,
        *("worker", "detection_workflows:registry", "--db", db_url),
        *("--lease-seconds", "1", "--poll-seconds", "0.05", "--until-idle"),
        *("--concurrency", str(concurrency)),
    ]
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=out)


def test_a_crash_loop_is_parked_at_its_bound_while_healthy_instances_finish(
    tmp_path: Path,
) -> None:
    """Goal: an instance whose step kills every worker that runs it is parked after
    ``crash_loop_lease_expiries`` (3) lapsed leases, and does not stop 100 healthy instances.

    Method: start 100 healthy instances and one poison instance; run worker processes (64 at
    once each) until idle, restarting each one that dies, at most 12 lives. The poison
    instance ends MANUAL_INTERVENTION poison_crash_loop with at most bound + 1 claims; every
    healthy instance SUCCEEDED; the workers that died by SIGKILL are exactly the poison's.
    """
    db_url = f"sqlite:///{tmp_path}/journal.db"
    log = tmp_path / "workers.log"
    with SyncEngine(db_url, registry) as engine:
        healthy = [
            engine.start("healthy", key=f"h-{n}", input=n).instance_id for n in range(HEALTHY)
        ]
        poison = engine.start("poison", key="p").instance_id
        began = time.monotonic()
        deaths = 0
        for _ in range(WORKER_LIVES_MAX):
            code = _worker(db_url, log, concurrency=64).wait(timeout=WAIT_SECONDS_MAX)
            if code == 0:
                break
            assert code == -signal.SIGKILL, log.read_text()[-3000:]
            deaths += 1
        else:
            pytest.fail(f"still not idle after {WORKER_LIVES_MAX} worker lives")
        elapsed = time.monotonic() - began
        parked = engine.get(poison)
        assert parked.status is InstanceStatus.MANUAL_INTERVENTION
        assert parked.reason_code == detection.POISON_CRASH_LOOP
        claims = [
            e
            for e in engine.detail(poison).timeline
            if e.subject == "owner" and e.detail == "claimed"
        ]
        assert len(claims) <= 3 + 1
        assert deaths == len(claims)
        statuses = {engine.get(i).status for i in healthy}
        assert statuses == {InstanceStatus.SUCCEEDED}
        print(
            f"poison parked after {len(claims)} claims ({deaths} workers killed) while "
            f"{HEALTHY} healthy finished in {elapsed:.1f}s"
        )


def test_a_silent_participant_is_flagged_by_the_worker_scan_and_cleared_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    asyncio.run(_a_silent_participant_is_flagged_by_the_worker_scan_and_cleared_after(tmp_path))
    # The flag is logged once, when it is raised (later scans find it open), with its ids.
    flagged = [r for r in caplog.records if "flagged for attention" in r.getMessage()]
    assert len(flagged) == 1, [r.getMessage() for r in flagged]
    assert flagged[0].levelname == "WARNING"
    assert flagged[0].__dict__["worker"].startswith("scan:")
    assert "participant_unresponsive" in flagged[0].getMessage()
    assert flagged[0].__dict__["instance"].startswith("wf_")


async def _a_silent_participant_is_flagged_by_the_worker_scan_and_cleared_after(
    tmp_path: Path,
) -> None:
    """Goal: an effect sent to a participant process that accepts the request and does not
    answer is flagged participant_unresponsive by the worker's own periodic scan, while other
    instances finish; when the participant answers, a later scan clears the flag.

    Method: a real participant service over HTTP holds the charge whose key contains the
    stuck instance's id (client timeout 120 s); the worker scans every 0.1 s with a 0.5 s
    silence bound.
    """
    with running_service(tmp_path / "participants", [BANK]) as service:
        bounds = DetectionBounds(participant_silent_seconds=0.5, scan_interval_seconds=0.1)
        async with Engine(
            f"sqlite:///{tmp_path}/journal.db", charge_registry(service.url)
        ) as engine:
            stuck = (await engine.start("charge", key="stuck", input=5)).instance_id
            # Idempotency keys derive from the instance id: hold this instance's charge only.
            service.rules({"participant": "bank", "action": "hold", "key_contains": stuck})
            others = [
                (await engine.start("charge", key=f"ok-{n}", input=n)).instance_id for n in range(5)
            ]
            worker = engine.worker(detection=bounds, lease_seconds=1.0, poll_seconds=0.05)
            running = asyncio.create_task(worker.run())
            store = engine.store

            async def flagged() -> bool:
                return any(
                    f.reason_code == "participant_unresponsive" for f in store.open_flags(stuck)
                )

            async def others_done() -> bool:
                statuses = [(await engine.get(i)).status for i in others]
                return statuses == [InstanceStatus.SUCCEEDED] * len(others)

            await until(others_done, what="the other instances to finish", timeout=WAIT_SECONDS_MAX)
            await until(
                flagged, what="the silent participant to be flagged", timeout=WAIT_SECONDS_MAX
            )
            [flag] = store.open_flags(stuck)
            assert flag.detected_by == f"scan:{worker.id}"
            assert "bank.charge key" in flag.evidence
            assert "attempt 1 INTENDED" in flag.evidence
            assert store.open_flags() == [flag]  # the healthy instances are not flagged
            assert (await engine.get(stuck)).status is InstanceStatus.RUNNING

            await asyncio.to_thread(service.release, "apply")

            async def cleared() -> bool:
                return store.open_flags(stuck) == []

            await until(cleared, what="the flag to clear", timeout=WAIT_SECONDS_MAX)
            assert (await engine.get(stuck)).status is InstanceStatus.SUCCEEDED
            [closed] = store.flags(stuck)
            assert closed.cleared_by == "detector"
            worker.stop()
            await running


def test_the_same_step_failure_parks_the_instance_before_its_policy_ends(tmp_path: Path) -> None:
    asyncio.run(_the_same_step_failure_parks_the_instance_before_its_policy_ends(tmp_path))


async def _the_same_step_failure_parks_the_instance_before_its_policy_ends(
    tmp_path: Path,
) -> None:
    """Goal: a local step failing with the same error ``poison_step_attempts`` times in a row
    parks the instance (poison_step) even though its policy allows 10 attempts; a policy with
    fewer attempts ends FAILED as before; changing errors are retried as before.

    Method: bound 3, a FakeClock (backoffs cost nothing), one worker until idle.
    """
    bounds = DetectionBounds(poison_step_attempts=3)
    async with Engine(f"sqlite:///{tmp_path}/j.db", registry, clock=FakeClock()) as engine:
        poison = (await engine.start("same_failure", key="many", input="many")).instance_id
        few = (await engine.start("same_failure", key="few", input="few")).instance_id
        changing = (await engine.start("changing_failure", key="flaky")).instance_id
        await engine.worker(detection=bounds).run(until_idle=True)
        parked = await engine.get(poison)
        assert parked.status is InstanceStatus.MANUAL_INTERVENTION
        assert parked.reason_code == detection.POISON_STEP
        assert parked.reason is not None
        assert "3 attempts in a row" in parked.reason
        assert "ValueError: price list has no entry for sku X-9" in parked.reason
        assert attempts["many"] == 3
        [step] = (await engine.detail(poison)).steps
        # The retry stays scheduled: an operator's resume runs it under the same identity.
        assert (step.status.value, step.attempt) == ("RETRY_SCHEDULED", 4)
        assert json.loads(step.error or "{}")["repeated"] == 3
        assert (await engine.get(few)).status is InstanceStatus.FAILED
        assert attempts["few"] == 2
        assert (await engine.get(changing)).status is InstanceStatus.SUCCEEDED
        assert attempts["flaky"] == 6
