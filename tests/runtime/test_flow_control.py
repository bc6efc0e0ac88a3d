"""Flow control on effects: limits per participant and operation, held across workers.

Two workers (two engines, two connections: as two processes) drive effects of one limited
operation; the participant logs when each call reached it. The rate it saw never exceeds
``burst + rate * window``, concurrency never exceeds its bound, and no effect's timeout (far
shorter than the time the last ones wait THROTTLED) ran while it waited. SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import flow_world
import ledgerflow as lf
from ledgerflow.errors import ConfigurationError
from ledgerflow.model.effect import EffectState
from ledgerflow.model.flow import AdmissionState, admissions_over_rate
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.testing.flow_checks import flow_violations
from processes import LEDGERFLOW, TESTS, WAIT_SECONDS_MAX, child_environment

TIMEOUT_SECONDS = 0.5


class Api:
    """A participant that logs when each call arrived, and how many ran at once."""

    def __init__(self, pause: float = 0.0) -> None:
        self.arrived: list[float] = []
        self.deadlines: list[tuple[float, float]] = []
        self.now = 0
        self.most = 0
        self.registry = lf.Registry()
        api = self.registry.add_participant(lf.Participant("api"))

        @api.effect(classification="compensatable", timeout_seconds=TIMEOUT_SECONDS)
        async def send(call: lf.EffectCall) -> dict[str, Any]:
            arrived = time.time()
            self.arrived.append(arrived)
            if call.deadline_at is not None:
                self.deadlines.append((arrived, call.deadline_at))
            self.now += 1
            self.most = max(self.most, self.now)
            await asyncio.sleep(pause)
            self.now -= 1
            return {"n": call.payload["n"]}

        @self.registry.workflow(name="notify", version=1)
        async def notify(ctx: lf.WorkflowContext, n: int) -> Any:
            return await ctx.effect(send, {"n": n, "customer": f"c{n % 2}"})


async def _drive(url: str, api: Api, count: int, **bounds: Any) -> list[lf.InstanceRecord]:
    async with lf.Engine(url, api.registry) as one, lf.Engine(url, api.registry) as two:
        await one.limit_effect("api", "send", **bounds)
        ids = [
            (await one.start("notify", key=f"n{n}", input=n, tenant="acme")).instance_id
            for n in range(count)
        ]
        workers = [e.worker(lease_seconds=5, poll_seconds=0.01, concurrency=64) for e in (one, two)]
        await asyncio.gather(*(w.run(until_idle=True) for w in workers))
        return [await one.wait(i, timeout=30) for i in ids]


def test_rate_with_burst_holds_across_two_workers(journal_url: str) -> None:
    """30 effects at 10/s with a burst of 5: the participant saw at most 5 + 10 * w calls in
    any w seconds, every effect succeeded, and those that waited longer than their timeout
    (0.5 s) while THROTTLED did not time out: the clock started at dispatch."""
    api = Api()
    records = asyncio.run(_drive(journal_url, api, 30, rate_per_second=10.0, burst=5))
    assert [r.status for r in records] == [lf.InstanceStatus.SUCCEEDED] * 30
    assert admissions_over_rate(api.arrived, rate_per_second=10.0, burst=5, jitter=0.1) is None
    assert max(api.arrived) - min(api.arrived) >= (30 - 5) / 10.0 - 0.05
    assert all(deadline - arrived >= TIMEOUT_SECONDS - 0.2 for arrived, deadline in api.deadlines)
    with lf.SyncEngine(journal_url, lf.Registry()) as engine:
        admissions = engine.store.flow_admissions()
        assert len(admissions) == 30
        waited = [a for a in admissions if a.throttled_seconds > TIMEOUT_SECONDS]
        assert len(waited) >= 15
        assert {a.state for a in admissions} == {AdmissionState.SETTLED}
        assert flow_violations(engine.store) == []


def test_concurrency_and_keys(journal_url: str) -> None:
    """At most 2 in flight per customer (a value of the input): 4 at once over two keys."""
    api = Api(pause=0.05)
    records = asyncio.run(_drive(journal_url, api, 16, concurrency_max=2, per="input.customer"))
    assert [r.status for r in records] == [lf.InstanceStatus.SUCCEEDED] * 16
    assert api.most <= 4
    with lf.SyncEngine(journal_url, lf.Registry()) as engine:
        keys = {a.flow_key for a in engine.store.flow_admissions()}
        assert keys == {"c0", "c1"}
        assert flow_violations(engine.store) == []


def test_a_limit_is_checked_and_removable(tmp_path: Path) -> None:
    with lf.SyncEngine(f"sqlite:///{tmp_path}/j.db", lf.Registry()) as engine:
        with pytest.raises(ConfigurationError):
            engine.limit_effect("api", "send", rate_per_second=0)
        with pytest.raises(ConfigurationError):
            engine.limit_effect("api", "send", concurrency_max=1, per="customer")
        engine.limit_effect("api", "send", rate_per_second=2.5, burst=3, per="tenant")
        engine.set_concurrency_limit(workflow="a", in_flight_max=3)
        [limit] = engine.store.effect_limits()
        assert (limit.rate_per_second, limit.burst, limit.per, limit.concurrency_max) == (
            2.5, 3, "tenant", None,
        )  # fmt: skip
        assert engine.store.limits() == {"workflow:a": 3}
        engine.limit_effect("api", "send")
        assert engine.store.effect_limits() == []


EFFECTS_ACROSS_PROCESSES = 120


def _worker(
    url: str, log: Path, *, lease: float = 10.0, kill: dict[str, Any] | None = None
) -> subprocess.Popen[bytes]:
    command = [
        *LEDGERFLOW,
        *("worker", "flow_world:registry", "--db", url),
        *("--poll-seconds", "0.02", "--until-idle", "--lease-seconds", str(lease)),
    ]
    env = child_environment(TESTS, FLOW_WORLD_LOG=str(log.parent / "calls.log"))
    env.pop("LEDGERFLOW_FAULTS", None)
    if kill is not None:
        env["LEDGERFLOW_FAULTS"] = json.dumps([{**kill, "action": "kill"}])
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=out)


@pytest.mark.slow
def test_three_worker_processes_hold_ten_per_second_with_a_burst_of_five(
    journal_url: str, tmp_path: Path
) -> None:
    """The issue's test, CI-sized: 120 effects (the issue says 1,000; the shape is the same, at
    12 s instead of 100) against 10/s with a burst of 5, driven by three real worker processes
    at once. The participant's own log shows the rate held (at most 5 + 10 * w calls in any w
    seconds, allowing each call's measured delay after its admission, at least 0.1 s; the
    store's admissions hold it exactly), and no effect timed out while throttled: every effect
    was confirmed on its first attempt and none timed out, although most waited THROTTLED far
    longer than their 1 s timeout; each call's deadline is its timeout after its arrival. (A
    process stalled past its lease by the machine's load would leave its call UNKNOWN, settled
    by the participant's lookup: allowed, but never a timeout.)"""
    log = tmp_path / "calls.log"
    outside = lf.SyncEngine(journal_url, flow_world.registry)
    try:
        outside.limit_effect("api", "send", rate_per_second=10.0, burst=5, per="tenant")
        ids = [
            outside.start(
                "notify", key=f"n{n}", input={"n": n, "log": str(log)}, tenant="acme"
            ).instance_id
            for n in range(EFFECTS_ACROSS_PROCESSES)
        ]
        for _ in range(3):  # a worker may find nothing due and leave: start three again
            workers = [_worker(journal_url, tmp_path / "workers.log") for _ in "abc"]
            assert [w.wait(timeout=WAIT_SECONDS_MAX * 4) for w in workers] == [0, 0, 0]
            if all(outside.get(i).status in TERMINAL_STATUSES for i in ids):
                break
        statuses = Counter(outside.get(i).status for i in ids)
        reasons = {outside.get(i).reason for i in ids} - {None}
        assert statuses == Counter({lf.InstanceStatus.SUCCEEDED: EFFECTS_ACROSS_PROCESSES}), reasons
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert len({c["key"] for c in calls}) == EFFECTS_ACROSS_PROCESSES
        effects = [e for i in ids for e in outside.store.effects(InstanceId(i))]
        assert {(e.state, e.attempt) for e in effects} == {(EffectState.CONFIRMED, 1)}
        admitted = {
            e.idempotency_key: a.admitted_at
            for e in effects
            for a in outside.store.flow_admissions()
            if a.effect_id == e.effect_id
        }
        # Each call arrived after its admission, by its dispatch's own delay.
        delays = [c["at"] - admitted[c["key"]] for c in calls]
        assert min(delays) > -0.01
        arrived = [c["at"] for c in calls]
        jitter = max(0.1, max(delays))
        over = admissions_over_rate(arrived, rate_per_second=10.0, burst=5, jitter=jitter)
        assert over is None, (over, jitter)
        assert max(arrived) - min(arrived) >= (EFFECTS_ACROSS_PROCESSES - 5) / 10.0 - 0.1
        assert all(c["deadline"] - c["at"] >= flow_world.TIMEOUT_SECONDS - 0.3 for c in calls)
        timed_out = [
            t
            for i in ids
            for t in outside.store.timeline(InstanceId(i))
            if t.to_state == "UNKNOWN" and "DeadlinePassed" in (t.detail or "")
        ]
        assert timed_out == []
        admissions = outside.store.flow_admissions()
        assert len(admissions) == EFFECTS_ACROSS_PROCESSES
        longest = max(a.throttled_seconds for a in admissions)
        assert longest > 5 * flow_world.TIMEOUT_SECONDS
        assert flow_violations(outside.store) == []
    finally:
        outside.close()


@pytest.mark.slow
def test_a_worker_killed_while_its_effect_is_throttled_never_makes_it_unknown(
    journal_url: str, tmp_path: Path
) -> None:
    """A worker SIGKILLed while an effect waits THROTTLED (its intent durable, its step
    STARTED): the next worker finds the attempt THROTTLED, so provably never sent, and
    dispatches it, instead of declaring its outcome UNKNOWN and asking the lookup. Every
    effect is confirmed on attempt 1, no timeline entry says UNKNOWN, and the participant's log
    holds each call once."""
    log = tmp_path / "calls.log"
    outside = lf.SyncEngine(journal_url, flow_world.registry)
    try:
        outside.limit_effect("api", "send", rate_per_second=0.1, burst=1)
        first = outside.start("notify", key="k0", input={"n": 0, "log": str(log)}).instance_id
        done = _worker(journal_url, tmp_path / "workers.log", lease=1.0)
        assert done.wait(timeout=WAIT_SECONDS_MAX) == 0
        # The next one waits up to 10 s for its slot (a slow start of the worker must not reach
        # it first): the worker dies as it begins to wait.
        ids = [
            first,
            outside.start("notify", key="k1", input={"n": 1, "log": str(log)}).instance_id,
        ]
        doomed = _worker(journal_url, tmp_path / "workers.log", lease=1.0, kill={
            "point": "effect.throttled"})  # fmt: skip
        assert doomed.wait(timeout=WAIT_SECONDS_MAX) == -signal.SIGKILL
        throttled = outside.store.flow_admissions(state=AdmissionState.THROTTLED)
        assert throttled
        heir = _worker(journal_url, tmp_path / "workers.log", lease=1.0)
        assert heir.wait(timeout=WAIT_SECONDS_MAX * 2) == 0
        reasons = [outside.get(i).reason for i in ids]
        assert {outside.get(i).status for i in ids} == {lf.InstanceStatus.SUCCEEDED}, reasons
        effects = [e for i in ids for e in outside.store.effects(InstanceId(i))]
        assert {(e.state, e.attempt) for e in effects} == {(EffectState.CONFIRMED, 1)}
        entries = [t for i in ids for t in outside.store.timeline(InstanceId(i))]
        assert [t for t in entries if t.to_state == "UNKNOWN"] == []
        keys = [json.loads(line)["key"] for line in log.read_text().splitlines()]
        assert sorted(keys) == sorted({e.idempotency_key for e in effects})
        assert flow_violations(outside.store) == []
    finally:
        outside.close()
