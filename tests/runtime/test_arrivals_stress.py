"""Arrivals from another process while instances move between waits: none is slept through.

Two worker processes drive the instances of ``tests/lost_wakeups.py``; this process, as another
client would, sends what each shape needs the moment the instance has just moved (the previous
signal consumed, the effect just accepted, the instance just claimed after a poke), so that
arrivals land while a worker is between its read of the inbox and its next park, not all before
a claim (which would hide the race). Every instance must then end as its arrivals say, with
none left waiting and none rescued by the stuck-work scan's safety net; both backends.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import ledgerflow as lf
from conditions import eventually
from ledgerflow.model.detection import STUCK_ARRIVAL
from ledgerflow.model.instance import TERMINAL_STATUSES
from lost_wakeups import TICKS, registry
from processes import LEDGERFLOW, TESTS, WAIT_SECONDS_MAX, child_environment

pytestmark = pytest.mark.slow

# Instances of each shape, per backend.
INSTANCES = 30
WORKERS = 2
# Bounds: every arrival sent, then every instance ended.
FEED_SECONDS_MAX = 90.0
END_SECONDS_MAX = 60.0


@dataclass
class Instance:
    instance_id: str
    shape: str
    # How far its feeder got (a shape's own counter).
    sent: int = 0
    generation: int = 0
    done: bool = False


@dataclass
class Feed:
    """Sends each instance what its shape needs the moment it has moved."""

    outside: lf.SyncEngine
    instances: list[Instance] = field(default_factory=list)

    def pass_once(self) -> bool:
        """One look at every instance; True once every arrival is sent."""
        for instance in self.instances:
            if not instance.done:
                FEEDERS[instance.shape](self.outside, instance)
        return all(i.done for i in self.instances)


def _consumed(outside: lf.SyncEngine, instance: Instance, event_id: str) -> bool:
    return outside.delivery(instance.instance_id, event_id).state == "CONSUMED"


def _loop(outside: lf.SyncEngine, instance: Instance) -> None:
    # Tick k once tick k-1 was taken: the instance is moving to its next wait right now.
    k = instance.sent
    if k == 0 or _consumed(outside, instance, f"t{k - 1}"):
        outside.signal(instance.instance_id, "tick", event_id=f"t{k}", payload=k)
        instance.sent += 1
        instance.done = instance.sent == TICKS


def _callback(outside: lf.SyncEngine, instance: Instance) -> None:
    # The participant calls back as soon as the dispatch was accepted.
    effects = outside.detail(instance.instance_id).effects
    if effects and effects[0].state is lf.EffectState.ACCEPTED:
        outside.complete_effect(
            effects[0].idempotency_key, applied=True, evidence={"ref": instance.instance_id}
        )
        instance.done = True


def _cancel_between_waits(outside: lf.SyncEngine, instance: Instance) -> None:
    if instance.sent == 0:
        outside.signal(instance.instance_id, "a", event_id="a", payload=1)
        instance.sent = 1
    elif _consumed(outside, instance, "a"):
        outside.cancel(instance.instance_id, reason="stress: between two waits")
        instance.done = True


def _cancel_in_sleep(outside: lf.SyncEngine, instance: Instance) -> None:
    record = outside.get(instance.instance_id)
    if instance.sent == 0 and record.status is lf.InstanceStatus.WAITING:
        # A poke no wait takes wakes the sleeping instance; the cancel follows its claim.
        outside.signal(instance.instance_id, "poke", event_id="poke")
        instance.sent, instance.generation = 1, record.generation
    elif instance.sent == 1 and record.generation > instance.generation:
        outside.cancel(instance.instance_id, reason="stress: while it sleeps")
        instance.done = True


def _fed_together(outside: lf.SyncEngine, instance: Instance) -> None:
    outside.signal(instance.instance_id, "a", event_id="a", payload=1)
    outside.signal(instance.instance_id, "b", event_id="b", payload=2)
    instance.done = True


FEEDERS: dict[str, Callable[[lf.SyncEngine, Instance], None]] = {
    "loop": _loop,
    "pay": _callback,
    "two-cancel": _cancel_between_waits,
    "nap": _cancel_in_sleep,
    "two": _fed_together,
}
WORKFLOW = {"loop": "loop", "pay": "pay", "two-cancel": "two", "nap": "nap", "two": "two"}


@pytest.fixture
def workers(journal_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    log = (tmp_path / "workers.log").open("ab")
    command = [
        *LEDGERFLOW,
        *("worker", "lost_wakeups:registry", "--db", journal_url),
        *("--lease-seconds", "5", "--poll-seconds", "0.02", "--concurrency", "64"),
    ]
    env = child_environment(TESTS)
    env.pop("LEDGERFLOW_FAULTS", None)
    processes = [subprocess.Popen(command, env=env, stdout=log, stderr=log) for _ in range(WORKERS)]
    yield processes
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=WAIT_SECONDS_MAX)
    log.close()


def _expected(outside: lf.SyncEngine, instance: Instance) -> str | None:
    """What is wrong with how the instance ended, or None."""
    record = outside.get(instance.instance_id)
    if instance.shape in ("two-cancel", "nap"):
        ok = record.status is lf.InstanceStatus.CANCELLED and record.cancel_outcome == "honoured"
        return None if ok else f"{record.status.value}, cancel {record.cancel_outcome}"
    wanted = {
        "loop": list(range(TICKS)),
        "pay": {"ref": instance.instance_id},
        "two": [1, 2],
    }[instance.shape]
    if record.status is not lf.InstanceStatus.SUCCEEDED:
        return f"{record.status.value} ({record.reason_code}: {record.reason})"
    got = outside.result(instance.instance_id, timeout=1)
    return None if got == wanted else f"result {got!r}"


def test_no_arrival_is_slept_through(
    journal_url: str, workers: list[subprocess.Popen[bytes]]
) -> None:
    outside = lf.SyncEngine(journal_url, registry)
    try:
        feed = Feed(outside)
        for shape, workflow in WORKFLOW.items():
            for n in range(INSTANCES):
                started = outside.start(workflow, key=f"{shape}-{n}", input=n)
                feed.instances.append(Instance(started.instance_id, shape))
        deadline = time.monotonic() + FEED_SECONDS_MAX
        while not feed.pass_once():
            assert all(p.poll() is None for p in workers), "a worker process died"
            pending = [i.shape for i in feed.instances if not i.done]
            assert time.monotonic() < deadline, f"arrivals never sent: {pending[:10]}"

        def ended() -> bool:
            records = [outside.get(i.instance_id) for i in feed.instances]
            return all(r.status in TERMINAL_STATUSES for r in records)

        try:
            eventually(ended, what="every instance to end", timeout=END_SECONDS_MAX)
        except AssertionError:
            waiting = [
                (i.shape, r.status.value, r.reason_code)
                for i in feed.instances
                if (r := outside.get(i.instance_id)).status not in TERMINAL_STATUSES
            ]
            raise AssertionError(f"{len(waiting)} left waiting: {waiting[:10]}") from None
        wrong = {
            i.instance_id: (i.shape, problem)
            for i in feed.instances
            if (problem := _expected(outside, i)) is not None
        }
        assert wrong == {}
        # The stuck-work scan wakes what a lost wake-up left asleep: it must never have had to.
        rescued = [
            i.shape
            for i in feed.instances
            if any(f.reason_code == STUCK_ARRIVAL for f in outside.store.flags(i.instance_id))
        ]
        assert rescued == []
        print(
            f"\n{len(feed.instances)} instances ({INSTANCES} per shape): every one ended as its "
            "arrivals say, 0 left waiting, 0 rescued by the scan"
        )
    finally:
        outside.close()
