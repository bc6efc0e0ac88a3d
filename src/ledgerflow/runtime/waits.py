"""Durable sleeps and waits for events, driven for one instance (internal).

A wait is a journaled step whose due time (its timer) is recorded when it starts. While it is
not satisfied the instance is WAITING: released, no lease, no coroutine in memory, due again at
its timer; a delivered event makes it due at once. On each resumption the wait is replayed: an
event that arrived (before or after the wait began) is consumed in the same commit that closes
the step, so one event answers one wait; a timeout is recorded only in a commit that proves no
event is pending, so exactly one of the two wins, whichever process each came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ledgerflow import limits
from ledgerflow.errors import EventArrivedError, WaitTimeoutError
from ledgerflow.ledger.records import (
    ConsumeDelivery,
    NoCancelRequest,
    NoPendingDelivery,
    RejectDelivery,
    StepRecord,
    StepWrite,
    Write,
)
from ledgerflow.ledger.transitions import instance_change, new_step, step_change
from ledgerflow.model.ids import StepSeq
from ledgerflow.model.instance import InstanceEvent
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.signal import Signal, not_approver
from ledgerflow.model.step import StepEvent, StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.control import Cancelled, Waiting
from ledgerflow.runtime.session import Session

# What a wait step a cancel request closed records as its error.
CANCELLED_WHILE_WAITING = "cancelled while waiting"

# (position, name, writes, due, how to park the instance) -> whether the wait was held.
Parks = Callable[
    [StepSeq, str, list[Write], float, Callable[[list[Write], float, str], Awaitable[None]]],
    Awaitable[bool],
]


class Updates(Protocol):
    """The update handlers a run declared (runtime/update_handlers.py), as a wait runs them:
    first those the journal holds under the wait, then, each turn, the requests in the inbox."""

    async def replayed(self, seq: StepSeq) -> None: ...

    async def taken(self, seq: StepSeq, pending: list[Write]) -> list[Write]: ...


@dataclass(slots=True, kw_only=True)
class WaitDriver:
    session: Session
    seq: StepSeq
    kind: StepKind
    name: str
    input_text: str
    recorded: StepRecord | None
    # Writes that ride with the wait's start, and with its timeout (a lock's queueing, and its
    # leaving the queue: see ledgerflow.runtime.locks).
    joins: tuple[Write, ...] = ()
    leaves: tuple[Write, ...] = ()

    # While parallel branches run, the wait is held until every branch is blocked, and the
    # instance parked for all of them at once (runtime/branches.py): False when none runs.
    parks: Parks | None = None
    # The run's declared update handlers, run under this wait (None: none run here).
    updates: Updates | None = None

    # The step's first write, when this wait starts it (it may be committed together with the
    # write that closes it, so the close builds on it rather than on the journal).
    _started: StepWrite | None = None

    def _start(self, due: float) -> tuple[list[Write], float]:
        """The writes that register the wait (none when replaying one), and its due time."""
        if self.recorded is not None:
            return [], self.recorded.next_attempt_at or limits.WAIT_FOREVER_AT
        s = self.session
        self._started = new_step(
            s.instance,
            self.seq,
            StepEvent.START,
            kind=self.kind,
            name=self.name,
            input=self.input_text,
            retry_policy=s.codec.encode(DEFAULT_STEP_RETRY.to_record()),
            now=s.clock.now(),
            next_attempt_at=due,
        )
        # A wait or timer does not start once a cancel request is accepted: the store refuses
        # the start then, and the instance cancels instead.
        return [self._started, NoCancelRequest(), *self.joins], due

    def _close(
        self, event: StepEvent, *, output: str | None = None, error: str | None = None
    ) -> StepWrite:
        s = self.session
        current = s.step(self.seq)
        if current is None:
            assert self._started is not None, "a wait closed before it started"
            current = self._started.record
        return step_change(
            current,
            event,
            now=s.clock.now(),
            generation=s.generation,
            output=output,
            error=error,
            next_attempt_at=None,
        )

    async def _suspend(self, pending: list[Write], due: float) -> None:
        # Between the reads this park decided from (the inbox, the cancel request) and its
        # commit: an arrival here makes the park due at once (the store's arrival flag).
        if faults.plan is not None:
            faults.point(
                "wait.before_suspend", instance=self.session.instance.business_key, seq=self.seq
            )
        if self.parks is not None and await self.parks(
            self.seq, self.name, pending, due, self._waiting
        ):
            raise Waiting  # never reached: parks raises it once the instance is WAITING
        await self._waiting(pending, due, f"step {self.seq} ({self.name})")
        raise Waiting

    async def _waiting(self, pending: list[Write], due: float, reason: str) -> None:
        await self.session.commit(
            *pending,
            instance_change(
                self.session.status,
                InstanceEvent.SUSPEND,
                reason_code="waiting",
                reason=reason,
                release=True,
                available_at=due,
            ),
        )

    def _replay_cancel(self) -> None:
        """A wait a cancel request closed replays as that cancel while the request stands: a
        cancelled parent replayed to wait for its "wait" children decides the same again
        (not a timeout). A replay checker, which never stops for a request, is unchanged."""
        recorded = self.recorded
        if recorded is None or recorded.status is not StepStatus.FAILED:
            return
        if self.session.cancel_requested and self.session.codec.decode(
            recorded.error or "null"
        ) == {"message": CANCELLED_WHILE_WAITING}:
            raise Cancelled(f"step {self.seq} ({self.name}) stopped while waiting")

    async def _stop_if_cancelled(self, pending: list[Write]) -> None:
        if self.session.cancel_requested:
            if self.recorded is None:
                raise Cancelled(f"step {self.seq} ({self.name}) was not started")
            error = self.session.codec.encode({"message": CANCELLED_WHILE_WAITING})
            await self.session.commit(*pending, self._close(StepEvent.FAIL, error=error))
            raise Cancelled(f"step {self.seq} ({self.name}) stopped while waiting")

    async def _replay_updates(self) -> None:
        if self.updates is not None and self.recorded is not None:
            await self.updates.replayed(self.seq)

    async def _take_updates(self, pending: list[Write]) -> list[Write]:
        if self.updates is None:
            return pending
        try:
            left = await self.updates.taken(self.seq, pending)
        except Cancelled:
            # A cancel stopped a handler under this wait: the wait ends as cancelled too.
            self.recorded = self.session.step(self.seq)
            await self._stop_if_cancelled([])
            raise
        if pending and not left:
            self.recorded = self.session.step(self.seq)  # its start was committed there
        return left

    async def sleep(self, due: float) -> None:
        await self._replay_updates()
        if self.recorded is not None and self.recorded.status is StepStatus.COMPLETED:
            return
        self._replay_cancel()
        pending, due = self._start(due)
        while True:
            await self._stop_if_cancelled(pending)
            pending = await self._take_updates(pending)
            remaining = due - self.session.clock.now()
            if remaining <= 0:
                await self.session.commit(*pending, self._close(StepEvent.COMPLETE, output="null"))
                return
            if remaining > limits.RETRY_INLINE_WAIT_SECONDS_MAX:
                await self._suspend(pending, due)
            if pending:
                await self.session.commit(*pending)
                pending = []
            await self.session.clock.sleep(remaining)

    async def wait_for(self, event: str, due: float, approvers: Sequence[str]) -> Signal:
        s = self.session
        await self._replay_updates()
        if self.recorded is not None and self.recorded.status is StepStatus.COMPLETED:
            return Signal.from_record(s.codec.decode(self.recorded.output or "{}"))
        if self.recorded is not None and self.recorded.status is StepStatus.FAILED:
            self._replay_cancel()
            raise self._timed_out(event)
        pending, due = self._start(due)
        while True:
            pending = await self._take_updates(pending)
            refused: list[Write] = []
            for delivery in await s.store.pending_deliveries(s.instance_id, event):
                if approvers and delivery.sender not in approvers:
                    reason = not_approver(delivery.sender, event, approvers)
                    refused.append(RejectDelivery(event_id=delivery.event_id, reason=reason))
                    continue
                signal = Signal(
                    name=event,
                    payload=s.codec.decode(delivery.payload),
                    event_id=delivery.event_id,
                    sender=delivery.sender,
                    received_at=delivery.received_at,
                )
                await s.commit(
                    *pending,
                    *refused,
                    ConsumeDelivery(event_id=delivery.event_id, seq=self.seq),
                    self._close(StepEvent.COMPLETE, output=s.codec.encode(signal.to_record())),
                )
                return signal
            await self._stop_if_cancelled([*pending, *refused])
            if s.clock.now() < due:
                await self._suspend([*pending, *refused], due)
            if faults.plan is not None:
                faults.point("wait.before_timeout", instance=s.instance.business_key, seq=self.seq)
            error = s.codec.encode({"message": f"no {event!r} before the timeout"})
            try:
                await s.commit(
                    *pending,
                    *refused,
                    NoPendingDelivery(name=event),
                    self._close(StepEvent.FAIL, error=error),
                    *self.leaves,
                )
            except EventArrivedError:
                continue  # The event won the race: take it on the next turn.
            raise self._timed_out(event)

    def _timed_out(self, event: str) -> WaitTimeoutError:
        return WaitTimeoutError(
            f"no {event!r} arrived before the wait's timeout",
            instance_id=self.session.instance_id,
            seq=self.seq,
        )
