"""Chaos machinery: a fleet of worker processes on one PostgreSQL schema, a driver that kills
and pauses them, and the verdict read from the engine's ledger and the participants' own.

Fixtures bind it for ``test_chaos.py``; ``bench/chaos.py`` loads this file by path and reuses
the same functions for its longer run.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processes import (
    LEDGERFLOW,
    SERVICE_URL_VARIABLE,
    Service,
    child_environment,
    running_service,
)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from chaos_workflows import PARTICIPANTS, registry  # noqa: E402

from ledgerflow import EffectState, InstanceStatus, SyncEngine  # noqa: E402
from ledgerflow.errors import StorageUnavailableError  # noqa: E402
from ledgerflow.model.instance import TERMINAL_STATUSES  # noqa: E402

WORKER_OPTIONS = ("--lease-seconds", "2", "--poll-seconds", "0.05", "--concurrency", "16")
# A stale owner finds out one of two ways: the store refuses its write or renewal, or its own
# watchdog sees that no renewal succeeded for a lease length and stops the copy first.
STALE_MARKERS = ("lost ownership of", "it may have lapsed")
PROCESS_WAIT_SECONDS = 30.0
# How long a woken worker may take to meet a refusal (its next heartbeat or commit): a few
# heartbeats of a 2 s lease.
STALE_NOTICE_SECONDS = 10.0


def is_stale_write_line(line: str) -> bool:
    """A worker log line saying a stale owner found out: a write (or a lease renewal) of it
    was refused, or it stopped a copy whose lease may have lapsed."""
    return any(marker in line for marker in STALE_MARKERS) or (
        "lease of" in line and "lost" in line
    )


@dataclass
class Fleet:
    """``size`` ``ledgerflow worker`` processes for ``chaos_workflows:registry``."""

    db_url: str
    service: Service
    log: Path
    size: int
    slots: list[subprocess.Popen[bytes]] = field(default_factory=list)
    kills: int = 0
    stops: int = 0
    held_when_paused: list[int] = field(default_factory=list)
    _all: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = child_environment(HERE, **{SERVICE_URL_VARIABLE: self.service.url})
        env.pop("LEDGERFLOW_FAULTS", None)
        command = [
            *LEDGERFLOW,
            *("worker", "chaos_workflows:registry", "--db", self.db_url, *WORKER_OPTIONS),
        ]
        with self.log.open("ab") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        self._all.append(process)
        return process

    def start(self) -> None:
        self.slots = [self._spawn() for _ in range(self.size)]

    def kill_and_restart(self, index: int) -> None:
        process = self.slots[index]
        process.kill()
        process.wait(timeout=PROCESS_WAIT_SECONDS)
        self.kills += 1
        self.slots[index] = self._spawn()

    def pause(self, index: int) -> None:
        self.slots[index].send_signal(signal.SIGSTOP)
        self.stops += 1

    def resume(self, index: int) -> None:
        """SIGCONT a paused worker and give it a bounded time to find out it is stale.

        Without the wait the rest of the fleet may finish everything first (group commit made
        that quick) and the figures would be read, or the woken worker killed by the next
        round of chaos, before it logged the refusal it is bound to meet."""
        before = self.stale_owner_noticed()
        self.slots[index].send_signal(signal.SIGCONT)
        until = time.monotonic() + STALE_NOTICE_SECONDS
        while time.monotonic() < until and self.stale_owner_noticed() <= before:
            if self.slots[index].poll() is not None:
                return
            time.sleep(0.05)  # Polling the worker's log, bounded by STALE_NOTICE_SECONDS.

    def crashed(self) -> list[int]:
        """Exit codes of workers that died on their own (none should)."""
        return [code for p in self.slots if (code := p.poll()) is not None]

    def close(self) -> None:
        """Kill -9 every process this fleet ever started (a paused one too)."""
        for process in self._all:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)
                    process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=PROCESS_WAIT_SECONDS)

    def stale_owner_noticed(self) -> int:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return sum(1 for line in text.splitlines() if is_stale_write_line(line))


def order_input(number: int) -> dict[str, Any]:
    return {"items": [number % 7 + 1, 3], "sku": f"SKU-{number % 13}", "order": f"o-{number}"}


def start_orders(
    engine: SyncEngine, count: int, *, prefix: str, over_seconds: float = 0.0
) -> list[str]:
    """Start ``count`` orders, spread evenly over ``over_seconds`` (0: as fast as possible)."""
    began = time.monotonic()
    ids = []
    for number in range(count):
        if over_seconds > 0:
            due = began + over_seconds * number / count
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # Pacing the load, not waiting for a condition.
        started = engine.start("order", key=f"{prefix}-{number}", input=order_input(number))
        ids.append(started.instance_id)
    return ids


def registry_for_tests() -> Any:
    """The chaos registry (the driver only starts and reads instances with it)."""
    return registry


class Starter(threading.Thread):
    """Starts orders in the background (its own engine), paced over ``over_seconds``."""

    def __init__(self, db_url: str, count: int, *, prefix: str, over_seconds: float) -> None:
        super().__init__(name="chaos-starter", daemon=True)
        self.db_url, self.count, self.prefix, self.over_seconds = (
            db_url,
            count,
            prefix,
            over_seconds,
        )
        self.ids: list[str] = []
        self.error: BaseException | None = None
        self._done = threading.Event()

    def run(self) -> None:
        try:
            with SyncEngine(self.db_url, registry) as engine:
                self.ids = start_orders(
                    engine, self.count, prefix=self.prefix, over_seconds=self.over_seconds
                )
        except BaseException as exc:  # noqa: BLE001 (re-raised by join_ids)
            self.error = exc
        finally:
            self._done.set()

    def finished(self) -> bool:
        return self._done.is_set()

    def join_ids(self, timeout: float = PROCESS_WAIT_SECONDS) -> list[str]:
        assert self._done.wait(timeout), "starting the orders did not finish"
        if self.error is not None:
            raise self.error
        return self.ids


def unfinished(engine: SyncEngine) -> int | None:
    """How many instances are not terminal, or None if the store cannot answer right now."""
    try:
        counts = engine.store.count_by_status()
    except StorageUnavailableError:
        return None
    return sum(n for status, n in counts.items() if status not in TERMINAL_STATUSES)


def leases_by_pid(engine: SyncEngine) -> dict[int, int]:
    """How many RUNNING instances each worker process (by pid) holds a lease on."""
    held: dict[int, int] = {}
    try:
        running = engine.list(status=InstanceStatus.RUNNING, limit=1000)
    except StorageUnavailableError:
        return held
    for record in running:
        if record.owner:
            parts = str(record.owner).split(":")
            if len(parts) >= 3 and parts[-2].isdigit():
                pid = int(parts[-2])
                held[pid] = held.get(pid, 0) + 1
    return held


def wait_all_terminal(engine: SyncEngine, total: int, *, timeout: float) -> bool:
    """Poll (bounded by ``timeout``) until ``total`` instances exist and none is unfinished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = unfinished(engine)
        if left == 0:
            with contextlib.suppress(StorageUnavailableError):
                if sum(engine.store.count_by_status().values()) >= total:
                    return True
        time.sleep(0.1)
    return False


def drive_chaos(
    fleet: Fleet,
    rng: random.Random,
    *,
    done: Callable[[], bool],
    deadline: float,
    kill_every: float = 1.5,
    stop_at: float = 1.0,
    stop_seconds: float = 5.0,
    stops_max: int = 1,
    log: Callable[[str], None] = print,
    holders: Callable[[], dict[int, int]] | None = None,
) -> None:
    """Until ``done()`` or ``deadline``: SIGKILL a random worker and restart it every
    ~``kill_every`` s; from ``stop_at`` s (and every ~10 s after, up to ``stops_max``) SIGSTOP
    one worker for ``stop_seconds`` (longer than its lease), then SIGCONT it: the one
    ``holders()`` (leases held by worker pid) names as holding the most, once one holds any.
    The paused worker is not killed while paused, so it wakes up as a stale owner."""
    began = time.monotonic()
    next_kill = began + kill_every * rng.uniform(0.5, 1.5)
    next_stop = began + stop_at
    paused: tuple[int, float] | None = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        if paused is not None and now >= paused[1]:
            fleet.resume(paused[0])
            log(f"chaos t={now - began:.1f}s SIGCONT worker slot {paused[0]}")
            paused = None
        if done() and paused is None:
            return
        if paused is None and fleet.stops < stops_max and now >= next_stop:
            # Pause the worker holding the most leases, so it wakes up as a stale owner.
            held = holders() if holders is not None else {}
            by_slot = [held.get(p.pid, 0) for p in fleet.slots]
            if holders is None or max(by_slot) > 0:
                index = by_slot.index(max(by_slot)) if holders else rng.randrange(fleet.size)
                fleet.pause(index)
                fleet.held_when_paused.append(by_slot[index])
                paused = (index, now + stop_seconds)
                next_stop = now + stop_seconds + 10.0
                log(
                    f"chaos t={now - began:.1f}s SIGSTOP worker slot {index} "
                    f"(holding {by_slot[index]} leases) for {stop_seconds}s"
                )
        if now >= next_kill:
            choices = [i for i in range(fleet.size) if paused is None or i != paused[0]]
            index = rng.choice(choices)
            fleet.kill_and_restart(index)
            log(f"chaos t={now - began:.1f}s SIGKILL worker slot {index} (restarted)")
            next_kill = now + kill_every * rng.uniform(0.5, 1.5)
        time.sleep(0.05)  # The driver's own schedule tick.
    if paused is not None:
        fleet.resume(paused[0])


@dataclass
class Verdict:
    statuses: dict[str, int]
    not_succeeded: list[tuple[str, str, str | None]]
    confirmed_effects: int
    applied_rows: int
    duplicates: list[str]
    lost_completions: list[str]
    never_applied: list[str]

    def summary(self) -> dict[str, Any]:
        return {
            "statuses": self.statuses,
            "not_succeeded": len(self.not_succeeded),
            "confirmed_effects": self.confirmed_effects,
            "applied_rows": self.applied_rows,
            "duplicates": len(self.duplicates),
            "lost_completions": len(self.lost_completions),
            "confirmed_never_applied": len(self.never_applied),
        }


def verdict(engine: SyncEngine, service: Service, instance_ids: list[str]) -> Verdict:
    """Compare the engine's ledger with each participant's own record of applications.

    A duplicate is a key applied more than once; a lost completion is a key a participant
    applied that no CONFIRMED effect of the engine accounts for.
    """
    statuses: dict[str, int] = {}
    not_succeeded = []
    confirmed: set[tuple[str, str]] = set()
    for instance_id in instance_ids:
        detail = engine.detail(instance_id)
        status = detail.instance.status
        statuses[status.value] = statuses.get(status.value, 0) + 1
        if status is not InstanceStatus.SUCCEEDED:
            not_succeeded.append((instance_id, status.value, detail.instance.reason))
        for effect in detail.effects:
            if effect.state is EffectState.CONFIRMED:
                confirmed.add((effect.participant, effect.idempotency_key))
    applied: dict[tuple[str, str], int] = {}
    rows = 0
    for spec in PARTICIPANTS:
        name = spec.split(":")[0]
        for row in service.ledger(name)["applied"]:
            key = (name, row["key"])
            applied[key] = applied.get(key, 0) + 1
            rows += 1
    return Verdict(
        statuses=statuses,
        not_succeeded=not_succeeded,
        confirmed_effects=len(confirmed),
        applied_rows=rows,
        duplicates=sorted(f"{p}:{k}" for (p, k), n in applied.items() if n > 1),
        lost_completions=sorted(f"{p}:{k}" for (p, k) in applied if (p, k) not in confirmed),
        never_applied=sorted(f"{p}:{k}" for (p, k) in confirmed if (p, k) not in applied),
    )


@contextlib.contextmanager
def chaos_service(folder: Path) -> Iterator[Service]:
    with running_service(folder, PARTICIPANTS) as service:
        yield service


@contextlib.contextmanager
def fleet_of(db_url: str, service: Service, log: Path, size: int) -> Iterator[Fleet]:
    fleet = Fleet(db_url=db_url, service=service, log=log, size=size)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.close()
