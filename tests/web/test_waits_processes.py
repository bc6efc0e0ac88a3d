"""Durable waits across real processes: a timer survives SIGKILL, and a timeout races an event.

Workers are ``ledgerflow worker`` processes over one SQLite journal; the test process starts
instances and delivers events through its own :class:`SyncEngine`, so every race here is
between two processes. A pause at a named fault point (``LEDGERFLOW_FAULTS``) holds the worker
inside the window under test, and the marker the worker drops on reaching the point (see
``wait_workflows``) tells the test when it is there, so nothing depends on a guessed sleep.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from wait_workflows import registry

from ledgerflow import DeliveryOutcome, InstanceStatus, StepStatus, SyncEngine
from ledgerflow.model.step import StepKind

pytestmark = pytest.mark.slow

NAP_SECONDS = 2.0
TIMEOUT_SECONDS = 1.0
PAUSE_SECONDS = 1.5


@pytest.fixture
def engine(processes: Any) -> Iterator[SyncEngine]:
    with SyncEngine(processes.db_url, registry) as engine:
        yield engine


def _transitions(engine: SyncEngine, instance_id: str, subject: str) -> list[str]:
    return [e.to_state for e in engine.detail(instance_id).timeline if e.subject == subject]


def test_timer_fires_after_the_worker_is_sigkilled(processes: Any, engine: SyncEngine) -> None:
    """Goal: a durable sleep fires on a new worker after the one that started it died.
    Method: a worker process runs 'nap' (2 s) until the instance is WAITING, then is SIGKILLed;
    the instance holds no owner and its timer step is STARTED with its due time. A new worker
    process (--until-idle, which stays while a timer is pending) finishes it no earlier than the
    timer; the journal shows the timer step completed exactly once."""
    instance_id = engine.start("nap", key="nap-1", input=NAP_SECONDS).instance_id
    first = processes.worker()
    processes.wait_until(
        lambda: engine.get(instance_id).status is InstanceStatus.WAITING,
        what="the instance to wait on its timer",
    )
    assert processes.kill(first) == -signal.SIGKILL

    waiting = engine.get(instance_id)
    assert waiting.status is InstanceStatus.WAITING
    assert waiting.owner is None
    (timer,) = engine.detail(instance_id).steps
    assert (timer.kind, timer.status) == (StepKind.TIMER, StepStatus.STARTED)
    assert timer.next_attempt_at == pytest.approx(waiting.available_at)

    second = processes.worker(until_idle=True)
    assert second.wait(timeout=30) == 0, processes.tail()
    assert engine.result(instance_id, timeout=1) == "rested"
    (fired,) = engine.detail(instance_id).steps
    assert (fired.kind, fired.status) == (StepKind.TIMER, StepStatus.COMPLETED)
    assert timer.next_attempt_at is not None
    assert fired.updated_at >= timer.next_attempt_at
    assert _transitions(engine, instance_id, "step:1") == ["STARTED", "COMPLETED"]


def _racing_worker(processes: Any, key: str) -> Any:
    rule = {
        "point": "wait.before_timeout",
        "action": "delay",
        "delay_seconds": PAUSE_SECONDS,
        "match": {"instance": key},
    }
    return processes.worker(faults=[rule])


def test_event_delivered_while_the_timeout_is_being_recorded_wins(
    processes: Any, engine: SyncEngine
) -> None:
    """Goal: when an event and a timeout race across two processes, exactly one wins, and an
    event that arrives before the timeout is committed is the winner.
    Method: 'patient' waits for 'go' with a 1 s timeout. The worker process reaches the timeout,
    finds no event, and pauses (fault rule: delay at wait.before_timeout) before recording it;
    while it is paused the test process delivers 'go'. The timeout commit must see the event and
    give way: the result is the event, the wait step COMPLETED (never FAILED), the inbox row
    CONSUMED."""
    key = "race-event"
    instance_id = engine.start("patient", key=key, input=TIMEOUT_SECONDS).instance_id
    worker = _racing_worker(processes, key)
    processes.wait_until(
        lambda: processes.marked("wait.before_timeout", key),
        what="the worker to reach the timeout",
    )
    # Inside the window: the worker owns the instance and has not recorded the timeout.
    assert engine.get(instance_id).status is InstanceStatus.RUNNING
    assert engine.detail(instance_id).steps[0].status is StepStatus.STARTED
    delivered = engine.signal(instance_id, "go", event_id="just-in-time", payload="event")
    assert delivered.outcome is DeliveryOutcome.ACCEPTED

    assert engine.result(instance_id, timeout=30) == {"got": "event", "event_id": "just-in-time"}
    (wait,) = engine.detail(instance_id).steps
    assert (wait.kind, wait.status) == (StepKind.WAIT, StepStatus.COMPLETED)
    assert _transitions(engine, instance_id, "step:1") == ["STARTED", "COMPLETED"]
    inbox = engine.detail(instance_id).inbox
    assert [(d.event_id, d.state, d.consumed_seq) for d in inbox] == [
        ("just-in-time", "CONSUMED", 1)
    ]
    assert processes.stop(worker) == 0, processes.tail()


def test_timeout_wins_when_no_event_arrives(processes: Any, engine: SyncEngine) -> None:
    """Goal: the control run: the same pause with no delivery ends with the timeout.
    Method: as the racing test, without the delivery: the workflow sees WaitTimeoutError, the
    wait step is FAILED once, nothing is in the inbox; an event sent afterwards is refused as
    ENDED and changes nothing."""
    key = "race-quiet"
    instance_id = engine.start("patient", key=key, input=TIMEOUT_SECONDS).instance_id
    worker = _racing_worker(processes, key)
    assert engine.result(instance_id, timeout=30) == {"timed_out": True}
    assert processes.marked("wait.before_timeout", key)
    (wait,) = engine.detail(instance_id).steps
    assert (wait.kind, wait.status) == (StepKind.WAIT, StepStatus.FAILED)
    assert _transitions(engine, instance_id, "step:1") == ["STARTED", "FAILED"]
    assert engine.detail(instance_id).inbox == []
    late = engine.signal(instance_id, "go", event_id="too-late", payload="event")
    assert late.outcome is DeliveryOutcome.ENDED
    assert engine.result(instance_id, timeout=1) == {"timed_out": True}
    assert processes.stop(worker) == 0, processes.tail()
