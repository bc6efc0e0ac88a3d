"""A worker SIGSTOPped mid-effect loses its heartbeat: the outcome goes UNKNOWN and is settled
by lookup, and the zombie's late heartbeat and result are refused.

A real worker process (``heartbeat_crash.py``) drives a long effect (heartbeat timeout 1 s)
under a 30 s lease and is stopped once two of its heartbeats are durable. A fresh worker here takes
the instance over as soon as the heartbeat is overdue by the store's clock (long before the
lease runs out), makes the outcome UNKNOWN, asks the lookup (not applied: the stopped attempt
applied nothing), and sends attempt 2 under the same key, which resumes from the last durable
details. Then the stopped worker is resumed: its next heartbeat is refused (LF312 or, if its
own heartbeat deadline cut it off first, nothing is written at all), its answer never reaches
the ledger, and it sees the result attempt 2 made.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ledgerflow as lf
from conditions import eventually

pytestmark = pytest.mark.slow

KEY = "hb-1"
PROCESS_SECONDS_MAX = 90.0
SCRIPT = Path(__file__).parent / "heartbeat_crash.py"


def _lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def test_a_stopped_worker_loses_its_heartbeat_and_the_zombie_is_refused(
    journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: see the module docstring.

    Method: SIGSTOP after two durable heartbeats; a worker here (lease 30 s too) settles the effect;
    then ``go`` and SIGCONT. Checks: the takeover came within a few seconds (the lease would
    take 30), the timeline is INTENDED -> UNKNOWN -> INTENDED -> CONFIRMED with attempt 2's
    evidence resumed from details 3 or later, the participant applied the batch once, the
    row's heartbeat is attempt 2's (the zombie's never landed), and the zombie saw attempt 2's
    result.
    """
    monkeypatch.setenv("LF_HEARTBEAT_FOLDER", str(tmp_path))
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import heartbeat_crash
    finally:
        sys.path.remove(str(SCRIPT.parent))
    zombie = subprocess.Popen(
        [sys.executable, str(SCRIPT), journal_url, KEY],
        env={**os.environ, "LF_HEARTBEAT_FOLDER": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: len(_written(tmp_path)) >= 2, what="two durable heartbeats")
        os.kill(zombie.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        # The last details made durable before the stop (a beat is logged once written).
        last_written = _written(tmp_path)[-1]

        async def take_over() -> lf.InstanceDetail:
            async with lf.Engine(journal_url, heartbeat_crash.registry) as engine:
                worker = engine.worker(lease_seconds=30, poll_seconds=0.05)
                running = asyncio.create_task(worker.run())
                try:
                    [instance] = await engine.list(workflow="batch", limit=5)
                    await engine.wait(instance.instance_id, timeout=30)
                    return await engine.detail(instance.instance_id)
                finally:
                    worker.stop()
                    await running

        detail = asyncio.run(take_over())
        settled_after = time.monotonic() - stopped_at
        (tmp_path / "go").touch()
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.wait(timeout=PROCESS_SECONDS_MAX) == 0
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait()

    assert detail.instance.status is lf.InstanceStatus.SUCCEEDED
    print(f"settled {settled_after:.2f}s after the stop (heartbeat timeout 1 s, lease 30 s)")
    assert settled_after < 15, f"settled {settled_after:.1f}s after the stop: the lease decided"
    [effect] = detail.effects
    timeline = [(e.from_state, e.to_state) for e in detail.timeline if e.subject == "effect:1"]
    assert timeline == [
        ("NEW", "INTENDED"),
        ("INTENDED", "UNKNOWN"),
        ("UNKNOWN", "INTENDED"),
        ("INTENDED", "CONFIRMED"),
    ]
    evidence = json.loads(effect.evidence or "null")
    assert evidence["attempt"] == 2
    # Attempt 2 resumed from the last durable details (throttled ones after it died with it).
    assert evidence["resumed_from"] == last_written
    applied = _lines(tmp_path / "applied.log")
    assert [a["attempt"] for a in applied] == [2]
    assert applied[0]["pid"] == os.getpid()
    # The zombie's heartbeat never landed: the row's heartbeat is attempt 2's, by the new owner.
    final = asyncio.run(_detail(journal_url, heartbeat_crash.registry, detail))
    [row] = final.effects
    # (Attempt 2's own beat came at once after its dispatch write: throttled, and it returned
    # before a later write, so the details stay those attempt 1 made durable.)
    assert (row.heartbeat_attempt, row.heartbeat_generation) == (2, detail.instance.generation)
    assert json.loads(row.heartbeat_details or "null") == last_written
    assert row.evidence == effect.evidence
    zombie_beats = [b for b in _lines(tmp_path / "beats.log") if b["n"] == "zombie"]
    assert all(b.get("refused") == "LF312" for b in zombie_beats)
    assert _lines(tmp_path / "zombie.log") == [{"result": evidence}]


def _written(folder: Path) -> list[object]:
    return [b["n"] for b in _lines(folder / "beats.log") if b.get("written")]


async def _detail(url: str, registry: lf.Registry, detail: lf.InstanceDetail) -> lf.InstanceDetail:
    async with lf.Engine(url, registry) as engine:
        return await engine.detail(detail.instance.instance_id)
