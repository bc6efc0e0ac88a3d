"""A worker: claims due instances, drives many at once, keeps their leases alive (internal).

The loop claims in bounded batches while it has free slots, and otherwise sleeps until a
driven instance finishes, someone wakes it (in this process, or a push from the journal when
another process made work due: see runtime/wakeups.py), or its poll comes. A
heartbeat renews the leases of everything in flight; an instance whose lease was lost (another
worker took it over with a higher generation) is cancelled here, and its writes would be
refused by the store anyway.

Work is routed by capability: the worker claims only instances pinned to a definition its
registry holds (workflow, version and fingerprint, compared in the claim's SQL), so it never
holds, let alone parks, an instance it cannot run. It announces itself in the store's worker
registry (host, pid, slots, what it serves) and keeps a heartbeat there while it runs, so an
operator sees the live workers and detection sees due work that no live worker serves.

One worker never runs two copies of one instance: a claim never hands it an instance it is
driving (even one whose lease lapsed while a stalled store held the heartbeat back), and a copy
whose lease nobody could renew for a whole lease length is stopped here, before any other
owner may have taken it over. A copy counts as running until its task has really ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError, StorageError, StorageUnavailableError
from ledgerflow.ledger.records import Commit, InstanceRecord, Release, StartClaim
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.definition import Registry
from ledgerflow.model.detection import DetectionBounds, is_last_chance
from ledgerflow.model.ids import Generation, InstanceId, WorkerId
from ledgerflow.runtime import journal_log
from ledgerflow.runtime.detection import bounds_from_environment
from ledgerflow.runtime.executor import Executor
from ledgerflow.runtime.periodic import INTERVAL_SECONDS_MIN, Periodic, PeriodicTask
from ledgerflow.runtime.seams import Runtime
from ledgerflow.runtime.wakeups import PushWakeups
from ledgerflow.storage.wake_sources import WakeSource

if TYPE_CHECKING:
    from ledgerflow.runtime.adoption import Adopter

    # Imported only by an engine made with tracing (the otel extra).

log = logging.getLogger("ledgerflow.worker")


def _check_limits(*, concurrency: int, lease_seconds: float) -> None:
    if not 1 <= concurrency <= limits.WORKER_CONCURRENCY_MAX:
        raise ConfigurationError(
            f"concurrency must be between 1 and {limits.WORKER_CONCURRENCY_MAX}"
        )
    if lease_seconds < limits.LEASE_SECONDS_MIN:
        raise ConfigurationError(f"lease_seconds must be at least {limits.LEASE_SECONDS_MIN}")


def new_worker_id() -> WorkerId:
    return WorkerId(f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")


@dataclass(slots=True)
class _Driven:
    """One instance this worker drives: its task, its fence, and how long its lease holds."""

    task: asyncio.Task[None]
    generation: Generation
    # Until when (time.monotonic()) the lease surely holds: when the claim or the last renewal
    # that succeeded was sent, plus the lease. The store's lease starts no earlier than that.
    held_until: float
    # Cancelled because its lease may have lapsed; it still counts as running until it ends.
    stopping: bool = False


class Worker:
    """Runs instances from a store until stopped.

    Example::

        async with Engine("sqlite:///orders.db", registry) as engine:
            await engine.worker(concurrency=32).run()
    """

    def __init__(
        self,
        *,
        runtime: Runtime,
        registry: Registry,
        concurrency: int = limits.WORKER_CONCURRENCY_DEFAULT,
        lease_seconds: float = limits.LEASE_SECONDS_DEFAULT,
        poll_seconds: float = limits.POLL_SECONDS_DEFAULT,
        worker_id: WorkerId | None = None,
        detection: DetectionBounds | None = None,
        on_released: Callable[[InstanceId], None] | None = None,
        periodic: Sequence[PeriodicTask] = (),
        adopter: Adopter | None = None,
        wakeups: WakeSource | None = None,
    ) -> None:
        _check_limits(concurrency=concurrency, lease_seconds=lease_seconds)
        self.id = worker_id or new_worker_id()
        self.store = runtime.store
        self.clock = runtime.clock
        metrics = self.metrics = runtime.metrics
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        # Bounds for poison (applied while claiming and driving) and stuck work (the scan).
        self.detection = detection or bounds_from_environment()
        # What this worker can run: the claim takes only instances pinned to one of these.
        self.serves = registry.served()
        # Takes over work pinned to code no live worker serves, after a clean replay (None:
        # this worker never does; see runtime/adoption.py).
        self.adopter = adopter
        self.executor = Executor(
            runtime=runtime, registry=registry, owner=self.id, detection=self.detection
        )
        if metrics is not None:
            metrics.watch_slots(lambda: len(self._running), concurrency)
        # Housekeeping beside the instances (the stuck-work scan, reconciliation...): whoever
        # builds the worker decides which (see Engine.worker), so the worker knows none of them.
        self.periodic = Periodic()
        for task in periodic:
            self.periodic.add(task)
        self.periodic.add(self._heartbeat_task())
        self._init_state(on_released)
        # Pushes from the journal when another process makes work due (the poll stays the
        # floor); only on real time, so that a simulation's worker wakes when its script says.
        self.wakeups = (
            PushWakeups(wakeups, wake=self.wake, metrics=metrics)
            if wakeups is not None and self.clock.real_time
            else None
        )

    def _init_state(self, on_released: Callable[[InstanceId], None] | None) -> None:
        """What the worker keeps while it runs: what it drives, what it lost, how it claims."""
        self._started_at: float | None = None
        self._running: dict[InstanceId, _Driven] = {}
        # Running instances one lapse away from the crash-loop bound (see _isolating).
        self._last_chance: set[InstanceId] = set()
        # Instances whose lease this worker let lapse because its own store stalled or failed
        # (not because anything died): taking one back counts no crash-loop lapse. Oldest
        # first, at most limits.WORKER_CONCURRENCY_MAX (another worker may have taken it).
        self._lost_to_store: dict[InstanceId, None] = {}
        # The renewal in flight, and whether the last one failed on the store.
        self._renewal: asyncio.Task[None] | None = None
        self._renewal_failed = False
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        # A death (an error that is not an Exception) of a task it drove: the worker's own.
        self._crash: BaseException | None = None
        self.driven = 0
        # Claims asked of the store so far (answered or failed).
        self.claims = 0
        # Told when this worker stops driving an instance (ended, suspended, parked or lost),
        # so that a result waiter in this process looks again now instead of at its next poll.
        self._on_released = on_released
        # Slots promised to starts in this process (see reserve) and whether run() is looping.
        self._reserved = 0
        self._active = False
        self._until_quiet = False
        # Whether the store may hold work this worker could claim: the last claim filled its
        # limit, or something new was announced since. A full worker that frees a slot claims
        # at once only then; otherwise its next poll looks, as an idle worker's would.
        self._maybe_more = True

    def wake(self) -> None:
        """Look at the store now (e.g. an instance was just started in this process)."""
        self._maybe_more = True
        self._wake.set()

    def stop(self) -> None:
        """Stop claiming; in-flight instances finish or are released by :meth:`run`."""
        self._stop.set()
        self._wake.set()

    def reserve(self) -> StartClaim | None:
        """Promise a slot to an instance this process is starting, so that the start's own
        transaction claims it (no separate claim, no poll); None when there is no free slot.
        Every reservation is settled by :meth:`adopt`."""
        if not self._active or self._stop.is_set():
            return None
        if len(self._running) + self._reserved >= self.concurrency:
            return None
        self._reserved += 1
        return StartClaim(
            owner=self.id,
            lease_seconds=self.lease_seconds,
            now=self._lease_now(),
            asked_at=time.monotonic(),
        )

    def adopt(self, record: InstanceRecord | None, claim: StartClaim) -> None:
        """Drive an instance the start claimed for this worker (None: the start failed or did
        not claim, and an ordinary claim may take it)."""
        self._reserved -= 1
        if record is None or record.owner != self.id:
            self.wake()
        elif self._active and record.instance_id not in self._running:
            self._start(record, held_until=claim.asked_at + self.lease_seconds)
        # Otherwise run() has ended: the lease lapses and another worker takes it over.

    @property
    def in_flight(self) -> int:
        """How many instances this worker is driving now."""
        return len(self._running)

    def cancel_requested(self, instance_id: InstanceId) -> None:
        """Someone in this process asked to cancel the instance: if it runs here, it stops
        before its next step without waiting for the heartbeat to read the request."""
        self.executor.cancel_requested(instance_id)

    def drives(self, instance_id: str) -> bool:
        """Whether this worker is driving the instance now (it tells ``on_released`` when not)."""
        return instance_id in self._running

    async def run(
        self,
        *,
        until_idle: bool = False,
        until_nothing_due: bool = False,
        grace_seconds: float = 10.0,
    ) -> None:
        """Claim and drive instances until :meth:`stop`.

        With ``until_idle`` it returns once no instance is runnable at all (every one is
        terminal, parked or waiting for an event) and none is in flight; instances held by a
        dead worker are waited for until their lease lapses, then taken over. With
        ``until_nothing_due`` it returns as soon as nothing can be claimed now and nothing is
        in flight (a simulation then moves its clock and calls again).
        """
        await self._announce()
        heartbeat = asyncio.create_task(self._heartbeat(), name="ledgerflow-heartbeat")
        housekeeping = asyncio.create_task(self.periodic.run_forever(), name="ledgerflow-periodic")
        self._active = True
        self._until_quiet = until_idle or until_nothing_due
        if self.wakeups is not None:
            self.wakeups.start()
        try:
            while not self._stop.is_set():
                claimed = await self._claim()
                if until_nothing_due and not claimed and not self._running:
                    return
                if until_idle and not claimed and not self._running:
                    adopts = self.adopter.adopts if self.adopter is not None else ()
                    due = await self.store.next_available_at(self.serves, adopts)
                    if due is None:
                        return
                if claimed and len(self._running) < self.concurrency:
                    continue
                await self._idle()
        finally:
            self._active = False
            heartbeat.cancel()
            housekeeping.cancel()
            if self.wakeups is not None:
                await self.wakeups.close()
            if self._crash is None:
                await self._drain(grace_seconds)
                await self._sign_off()
            else:
                # A simulated death: everything in memory is dropped, nothing is released, and
                # nothing still unwinding may reach the store. Waiting for the unwinding keeps
                # a simulation's next worker life independent of thread timing.
                self.executor.alive = False
                dying = [entry.task for entry in self._running.values()]
                for task in dying:
                    task.cancel()
                await asyncio.gather(*dying, return_exceptions=True)
        if self._crash is not None:
            raise self._crash

    async def _claim(self) -> int:
        free = self.concurrency - len(self._running) - self._reserved
        if free <= 0 or self._isolating():
            return 0
        limit = min(free, limits.CLAIM_BATCH_MAX)
        # Cleared before the claim: an announcement while it runs is not lost.
        self._maybe_more = False
        sent = time.monotonic()
        try:
            records = await self.store.claim(
                owner=self.id,
                now=self._lease_now(),
                lease_seconds=self.lease_seconds,
                limit=limit,
                lease_expiries_max=self.detection.crash_loop_lease_expiries,
                alone=not self._running,
                running=list(self._running),
                serves=self.serves,
                retaking=list(self._lost_to_store),
            )
        except StorageUnavailableError as exc:
            log.warning("claim failed, will retry: %s", exc)
            self._maybe_more = True
            return 0
        finally:
            self.claims += 1
        if len(records) >= limit or any(
            is_last_chance(r.lease_expiries, self.detection.crash_loop_lease_expiries)
            for r in records
        ):
            self._maybe_more = True  # It stopped early: more may be waiting.
        elif self.adopter is not None and self.adopter.due():
            records = [*records, *await self._adopt(limit - len(records))]
        if self.metrics is not None and records:
            self.metrics.claimed(records, now=self.clock.now())
        for record in records:
            if record.instance_id in self._lost_to_store:
                del self._lost_to_store[record.instance_id]
                if self.metrics is not None:
                    self.metrics.lease_retaken()
                log.info(
                    "took back instance %s, whose lease lapsed while the store stalled",
                    record.instance_id,
                    extra=journal_log.identity(record, worker=self.id),
                )
            if record.lease_expiries > 0:
                log.warning(
                    "taking over instance %s: its owner's lease expired (%d in a row)",
                    record.instance_id,
                    record.lease_expiries,
                    extra=journal_log.identity(record, worker=self.id),
                )
            self._start(record, held_until=sent + self.lease_seconds)
        return len(records)

    async def _adopt(self, free: int) -> list[InstanceRecord]:
        """Work pinned to code no live worker serves, adopted onto this worker's code after a
        clean replay (claimed, to be started with the claim's)."""
        assert self.adopter is not None
        try:
            return await self.adopter.adopt(
                limit=free,
                running=list(self._running),
                lease_seconds=self.lease_seconds,
                lease_now=self._lease_now(),
            )
        except StorageUnavailableError as exc:
            log.warning("adoption failed, will retry: %s", exc)
            return []

    # -- the worker registry -------------------------------------------------------------------

    def _heartbeat_task(self) -> PeriodicTask:
        """The worker's heartbeat in the registry, a few times per liveness bound."""
        every = self.detection.worker_silent_seconds / limits.WORKER_HEARTBEATS_PER_BOUND
        return PeriodicTask(
            name="worker-heartbeat",
            interval_seconds=max(INTERVAL_SECONDS_MIN, every),
            run=self._beat,
        )

    def _record(self) -> WorkerRecord:
        now = self.clock.now()
        if self._started_at is None:
            self._started_at = now
        return WorkerRecord(
            worker_id=self.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self._started_at,
            slots=self.concurrency,
            heartbeat_at=now,
            serves=self.serves,
        )

    async def _announce(self) -> None:
        """Register in the store's worker registry. A store that is down now does not stop
        the worker: its next heartbeat registers it."""
        try:
            await self.store.register_worker(self._record(), now=self.clock.now())
        except StorageUnavailableError as exc:
            log.warning("could not register worker %s yet: %s", self.id, exc)

    async def _beat(self) -> None:
        if not await self.store.heartbeat_worker(self.id, now=self.clock.now()):
            # Its row was pruned or marked stopped meanwhile: announce it again.
            await self.store.register_worker(self._record(), now=self.clock.now())

    async def _sign_off(self) -> None:
        """A clean shutdown: no longer live from now, rather than when its heartbeat ages."""
        with contextlib.suppress(StorageError):
            await self.store.stop_worker(self.id, now=self.clock.now())

    def _isolating(self) -> bool:
        """True while an instance on its last chance before the crash-loop bound runs here and
        has not committed yet: until it shows progress, nothing else may die beside it."""
        for instance_id in self._last_chance:
            session = self.executor.sessions.get(instance_id)
            # No session yet: it has not even started, let alone committed.
            if session is None or session.commits == 0:
                return True
        return False

    def _lease_now(self) -> float | None:
        """The worker's time for lease decisions, or None where the database's clock decides
        (many machines share it; a worker's own clock never decides ownership there). A clock
        other than the system's (a test's fake clock) decides on every backend: the database's
        clock would never see the time it makes pass."""
        if self.store.database_clock and self.clock.real_time:
            return None
        return self.clock.now()

    def _start(self, record: InstanceRecord, *, held_until: float) -> None:
        if record.instance_id in self._running:
            # The claim excludes what this worker drives, so this is a bug: never start a
            # second copy beside the first. The new lease lapses and recovery takes over.
            log.error("not starting a second copy of %s in one worker", record.instance_id)
            return
        task = asyncio.create_task(self.executor.drive(record), name=record.instance_id)
        self._running[record.instance_id] = _Driven(task, record.generation, held_until)
        if is_last_chance(record.lease_expiries, self.detection.crash_loop_lease_expiries):
            self._last_chance.add(record.instance_id)
        task.add_done_callback(functools.partial(self._finished, record.instance_id))

    def _finished(self, instance_id: InstanceId, task: asyncio.Task[None]) -> None:
        # A claim now can only find new work if this worker was full (it stopped claiming)
        # while work may be waiting, or if run() waits for quiet; otherwise the poll or a
        # start's wake finds it.
        full = len(self._running) + self._reserved >= self.concurrency
        entry = self._running.get(instance_id)
        if entry is not None and entry.task is task:
            del self._running[instance_id]
            self._last_chance.discard(instance_id)
        self.driven += 1
        if not task.cancelled():
            error = task.exception()
            if error is not None and not isinstance(error, Exception):
                self._crash = error
                self.stop()
            elif error is not None:
                log.error(
                    "driving %s failed",
                    instance_id,
                    exc_info=error,
                    extra={"instance": instance_id, "worker": self.id},
                )
        if (full and self._maybe_more) or self._until_quiet:
            self._wake.set()
        if self._on_released is not None:
            self._on_released(instance_id)

    async def _idle(self) -> None:
        timeout = self.poll_seconds
        self._wake.clear()
        # Watched only with a slot free: a full worker has nothing to claim (a push still
        # tells it that work may wait for its next free slot).
        wakeups = self.wakeups
        watching = wakeups is not None and len(self._running) + self._reserved < self.concurrency
        if watching and wakeups is not None:
            wakeups.idle(True)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
        finally:
            if watching and wakeups is not None:
                wakeups.idle(False)

    async def _heartbeat(self) -> None:
        every = self.lease_seconds / limits.HEARTBEATS_PER_LEASE
        # The renewal runs on its own, so that a store stalled inside it cannot hold back the
        # check of which leases may have lapsed meanwhile.
        try:
            while True:
                await asyncio.sleep(every)
                self._stop_lapsed()
                if self._renewal is None or self._renewal.done():
                    self._renewal = asyncio.create_task(self._renew(), name="ledgerflow-renewal")
        finally:
            if self._renewal is not None:
                self._renewal.cancel()

    def _store_at_fault(self) -> bool:
        """Whether leases lapse because this worker's store does not answer: a renewal is
        still waiting on it, or the last one failed on it (the worker itself is alive: its
        heartbeat runs)."""
        stuck = self._renewal is not None and not self._renewal.done()
        return stuck or self._renewal_failed

    def _stop_lapsed(self) -> None:
        """Stop every copy whose lease nobody could renew for a whole lease length: another
        worker may own it by now. A stopped dispatch is resumed as UNKNOWN and resolved."""
        now = time.monotonic()
        for instance_id, entry in self._running.items():
            if entry.held_until < now and not entry.stopping:
                entry.stopping = True
                store = self._store_at_fault()
                if store:
                    self._lost_to_store[instance_id] = None
                    while len(self._lost_to_store) > limits.WORKER_CONCURRENCY_MAX:
                        del self._lost_to_store[next(iter(self._lost_to_store))]
                if self.metrics is not None:
                    self.metrics.lease_lost("store" if store else "lapsed")
                log.warning(
                    "no renewal of the lease of %s for %.1fs: it may have lapsed; stopping it",
                    instance_id,
                    now - entry.held_until + self.lease_seconds,
                    extra={"instance": instance_id, "worker": self.id},
                )
                entry.task.cancel()

    async def _renew(self) -> None:
        leases = [(i, entry.generation) for i, entry in self._running.items()]
        if not leases:
            return
        sent = time.monotonic()
        try:
            lost = set(
                await self.store.renew(
                    owner=self.id,
                    leases=leases,
                    now=self._lease_now(),
                    lease_seconds=self.lease_seconds,
                )
            )
        except StorageUnavailableError as exc:
            self._renewal_failed = True
            log.warning("lease renewal failed: %s", exc)
            return
        self._renewal_failed = False
        for instance_id, generation in leases:
            entry = self._running.get(instance_id)
            if entry is None or entry.generation != generation:
                continue  # It ended meanwhile; a later copy has its own lease.
            if instance_id not in lost:
                entry.held_until = max(entry.held_until, sent + self.lease_seconds)
                continue
            session = self.executor.sessions.get(instance_id)
            if session is not None and session.released:
                continue  # It gave the lease up itself while the renewal was queued.
            if self.metrics is not None:
                self.metrics.lease_lost("lost")
            log.warning(
                "lease of %s lost; stopping it here",
                instance_id,
                extra={"instance": instance_id, "worker": self.id, "generation": generation},
            )
            entry.task.cancel()
        try:
            asked = await self.store.cancel_requests(owner=self.id)
        except StorageUnavailableError:
            return
        for instance_id in asked:
            self.executor.cancel_requested(instance_id)

    async def _drain(self, grace_seconds: float) -> None:
        """Stopping: let in-flight instances finish within the grace period, then stop the
        rest and give their leases back at once, so another worker resumes them now rather
        than when the leases lapse. A stopped dispatch is resumed as UNKNOWN and resolved."""
        running = dict(self._running)
        if not running:
            return
        _, pending = await asyncio.wait(
            [entry.task for entry in running.values()], timeout=grace_seconds
        )
        if not pending:
            return
        for task in pending:
            task.cancel()
        await asyncio.wait(pending)
        stopped = [
            Commit(
                instance_id=instance_id,
                owner=self.id,
                generation=entry.generation,
                writes=(Release(available_at=self.clock.now()),),
            )
            for instance_id, entry in running.items()
            if entry.task in pending
        ]
        if stopped:
            with contextlib.suppress(StorageError):
                # A refused release (fenced: it already let go, or another worker took over) is
                # fine as it is; the results are not errors to raise.
                await self.store.commit_together(stopped, now=self.clock.now())
