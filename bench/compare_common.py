"""What both engines' benchmark roles share: the participant's books, the role protocol with the
orchestrator (``bench/compare.py``), timing helpers.

A role is a subprocess running one workload on one engine. It talks to the orchestrator over
its stdin and stdout, one line each:

    role -> "ready"              set up (imports, store open or DBOS launched), nothing run yet
    orchestrator -> "go"         start the workload (write counting begins before this)
    role -> "started"            (recovery load only) every instance is blocked inside step 2
    role -> "result {json}"      the figures; write counting ends after this
    orchestrator -> "exit"       close the store and exit

Everything else a role says goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

# The recovery workload's interrupted process sets this: step 2 then blocks until the process is
# SIGKILLed, so every instance is interrupted at the same point (step 1 done, step 2 running).
BLOCK_STEP2_ENV = "LEDGERFLOW_BENCH_BLOCK_STEP2"
# How Ledgerflow's concurrent workloads issue their starts: "together" (one asyncio.gather, the
# default) or "one-by-one" (each start awaited before the next is called, as DBOS's
# start_workflow calls are made). Start latency is first step minus the start's own call, so
# the two differ in what a start waits for: together, the n-th waits behind the n-1 issued in
# the same instant; one by one, the queue is in the caller and not in the figure.
STARTS_ENV = "LEDGERFLOW_BENCH_STARTS"
# Bounds: no role waits forever.
RUN_SECONDS_MAX = 600.0
DONE_POLL_SECONDS = 0.001


def say(text: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def block_step2() -> bool:
    return os.environ.get(BLOCK_STEP2_ENV) == "1"


class Desk:
    """The in-process participant's own books: one application per idempotency key.

    Both engines call it with a key that is the same on every attempt, so a re-dispatch after a
    crash is applied once; ``calls`` counts every call to show how many were repeats.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # DBOS calls it from many threads at once
        self.evidence: dict[str, dict[str, Any]] = {}
        self.calls = 0

    def apply(self, key: str, payload: Any) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            found = self.evidence.get(key)
            if found is None:
                found = {"entry": len(self.evidence) + 1, "payload": payload}
                self.evidence[key] = found
            return found


class Marks:
    """When each instance's start was called and when its first step body ran (perf_counter),
    and how many instances have reached the blocking step 2 (recovery load)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: dict[int, float] = {}
        self.first_step: dict[int, float] = {}
        self.reached_step2 = 0
        self.all_reached = threading.Event()
        self.expected = 0

    def start_called(self, n: int) -> None:
        self.started[n] = time.perf_counter()

    def step_ran(self, n: int) -> None:
        now = time.perf_counter()
        with self._lock:
            self.first_step.setdefault(n, now)

    def step2_reached(self) -> None:
        with self._lock:
            self.reached_step2 += 1
            if self.reached_step2 >= self.expected:
                self.all_reached.set()

    def start_latency_ms(self, since: float | None = None) -> dict[str, float]:
        """p50/p99 of first step minus start call; with ``since``, first step minus that one
        instant (recovery: from the fresh process opening the store)."""
        values = [
            (t - (since if since is not None else self.started[n])) * 1000
            for n, t in self.first_step.items()
            if since is not None or n in self.started
        ]
        if not values:
            return {"p50": 0.0, "p99": 0.0, "samples": 0}
        return {
            "p50": round(percentile(values, 50), 3),
            "p99": round(percentile(values, 99), 3),
            "samples": len(values),
        }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def tell(line: str) -> None:
    print(line, flush=True)


def ready_then_wait_go() -> None:
    tell("ready")
    line = sys.stdin.readline().strip()
    if line != "go":
        raise SystemExit(f"expected 'go' from the orchestrator, got {line!r}")


def report(figures: dict[str, Any]) -> None:
    tell("result " + json.dumps(figures))


def wait_exit() -> None:
    """Hold the store open until the orchestrator has counted the writes."""
    sys.stdin.readline()


def sleep_until_killed() -> None:
    while True:
        time.sleep(3600)
