"""A durable named lock as workflow code holds it: ``async with ctx.lock(name)`` (internal).

Acquiring is a journal position of kind LOCK: its start carries the store's
:class:`~ledgerflow.ledger.locks.AcquireLock` (granted at once if nobody holds the lock, else
queued), and the grant always arrives as an event in the instance's inbox, which the position
takes as a wait takes a signal (:class:`~ledgerflow.runtime.waits.WaitDriver`): while queued the
instance is WAITING, holding no lease and no memory, and the release that hands it the lock
makes it due in the same transaction. A timeout is recorded only in a commit that proves no
grant is pending, and leaves the queue in that commit.

Leaving the block normally, or by a business failure of the workflow's, journals a release
position whose commit gives the lock up and hands it on. Leaving it because the engine stopped
the run (a wait that parks the instance, a crash, lost ownership, a cancel, a park) or by a
defect of the code (the instance parks: what the lock protects is in doubt) releases nothing:
the lock is held across waits and crashes, and an instance's final ending releases every lock it
holds in the ending's own transaction. Replayed, both positions answer from the journal: the
lock is not acquired again, nor released twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, TypeVar

from ledgerflow import limits
from ledgerflow.errors import (
    LockDeadlockError,
    LockTimeoutError,
    RegistrationError,
    WaitTimeoutError,
)
from ledgerflow.ledger.locks import (
    GRANT_SENDER,
    AcquireLock,
    LeaveLockQueue,
    ReleaseLock,
    grant_event,
)
from ledgerflow.ledger.records import StepRecord
from ledgerflow.ledger.transitions import new_step
from ledgerflow.model.definition import WorkflowDefinition
from ledgerflow.model.ids import StepSeq
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.signal import Signal
from ledgerflow.model.step import StepEvent, StepKind
from ledgerflow.runtime import faults
from ledgerflow.runtime.branches import Branches
from ledgerflow.runtime.session import Session
from ledgerflow.runtime.waits import WaitDriver

LOCK_NAME_LENGTH_MAX = 200
T = TypeVar("T")


class LockingContext(Protocol):
    """What a lock takes of the workflow context that holds it (its positions and waits:
    :class:`~ledgerflow.runtime.context.WorkflowContext`)."""

    _session: Session
    _definition: WorkflowDefinition
    _branches: Branches

    def _checked(self, what: str, check: Callable[[], T]) -> T: ...

    def _next_seq(self) -> StepSeq: ...

    def _replayed(
        self, seq: StepSeq, *, kind: StepKind, name: str, input_text: str | None
    ) -> StepRecord | None: ...

    def _wait_driver(self, kind: StepKind, name: str, spec: dict[str, Any]) -> WaitDriver: ...

    def _wait_span(self, driver: WaitDriver) -> contextlib.AbstractContextManager[None]: ...


class DurableLock:
    """What ``ctx.lock(name, timeout=...)`` returns: an async context manager (see module)."""

    def __init__(self, ctx: LockingContext, name: str, *, timeout: float | None) -> None:
        if not isinstance(name, str) or not 0 < len(name) <= LOCK_NAME_LENGTH_MAX:
            raise RegistrationError(
                f"a lock's name is a text of 1 to {LOCK_NAME_LENGTH_MAX} characters, got {name!r}"
            )
        self._ctx = ctx
        self.name = name
        self.timeout = timeout
        # The acquiring position, once granted.
        self.seq: StepSeq | None = None

    async def __aenter__(self) -> DurableLock:
        ctx = self._ctx
        session = ctx._session
        spec = {"lock": self.name, "timeout": self.timeout}
        driver = ctx._wait_driver(StepKind.LOCK, f"lock:{self.name}", spec)
        driver.joins = (AcquireLock(name=self.name, seq=driver.seq),)
        driver.leaves = (LeaveLockQueue(name=self.name, seq=driver.seq),)
        now = session.clock.now()
        due = now + self.timeout if self.timeout is not None else limits.WAIT_FOREVER_AT

        async def acquire(due: float) -> Signal:
            if driver.recorded is None:
                # Ask first, in a commit of its own: a free lock is granted in it, and the grant
                # is then taken at once, without parking the instance to be woken by its own
                # grant.
                asking, due = driver._start(due)
                await session.commit(*asking)
                driver.recorded = session.step(driver.seq)
            with ctx._wait_span(driver):
                return await driver.wait_for(grant_event(self.name), due, (GRANT_SENDER,))

        try:
            # Handed back in position order among parallel branches (runtime/branches.py).
            answer = await ctx._branches.call(driver.seq, acquire(due))
        except WaitTimeoutError:
            raise LockTimeoutError(
                f"lock {self.name!r} was not granted before the timeout",
                instance_id=session.instance_id,
                seq=driver.seq,
                lock=self.name,
            ) from None
        if isinstance(answer.payload, dict) and "deadlock" in answer.payload:
            hops = [str(hop) for hop in answer.payload["deadlock"]]
            raise LockDeadlockError(
                f"waiting for lock {self.name!r} would close a cycle: {'; '.join(hops)}",
                instance_id=session.instance_id,
                seq=driver.seq,
                lock=self.name,
                cycle="; ".join(hops),
            )
        self.seq = driver.seq
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and not self._ctx._definition.is_business_failure(exc):
            # The engine stopped the run here (waiting, a crash, a cancel, a park), or a defect
            # of the code left the protected state in doubt (the instance parks, holding the
            # lock visibly): the lock stays held, and the instance's final ending releases it.
            return
        await self._release()

    async def _release(self) -> None:
        ctx = self._ctx
        session = ctx._session
        assert self.seq is not None, "a lock released before it was granted"
        name = f"unlock:{self.name}"
        input_text = session.codec.encode({"lock": self.name, "seq": self.seq})

        def check() -> tuple[StepSeq, StepRecord | None]:
            seq = ctx._next_seq()
            return seq, ctx._replayed(seq, kind=StepKind.LOCK, name=name, input_text=input_text)

        seq, recorded = ctx._checked(name, check)
        ctx._branches.take(seq)
        if recorded is None:
            await ctx._branches.call(seq, self._released(seq, self.seq, name, input_text))
        else:
            await ctx._branches.call(seq, _nothing())

    async def _released(self, seq: StepSeq, held: StepSeq, name: str, input_text: str) -> None:
        session = self._ctx._session
        if faults.plan is not None:
            faults.point("lock.before_release", instance=session.instance.business_key, seq=seq)
        await session.commit(
            new_step(
                session.instance,
                seq,
                StepEvent.COMPLETE,
                kind=StepKind.LOCK,
                name=name,
                input=input_text,
                retry_policy=session.codec.encode(DEFAULT_STEP_RETRY.to_record()),
                now=session.clock.now(),
                output="null",
            ),
            ReleaseLock(name=self.name, seq=held, run=session.instance.run),
        )


async def _nothing() -> None:
    """A release the journal holds already: nothing to write, handed back in its turn."""
