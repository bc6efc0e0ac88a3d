"""One attempt's heartbeats: fenced writes, throttled, flushed on raise (internal).

An effect declared with ``heartbeat_timeout=`` gets one :class:`AttemptHeartbeats` per
dispatch. Its first write is made just before the participant is called (the attempt's
heartbeat clock starts at dispatch, not at intent); each ``await call.heartbeat(details)``
after it writes again when the last write is old enough (:func:`throttle_seconds`), or keeps
the details for the next write, which an effect that raises makes before its outcome is
recorded. Every write is an :class:`~ledgerflow.ledger.records.EffectHeartbeat` in the owner's
fenced commit: refused unless the effect is still INTENDED at this attempt and this session
still owns the instance at its generation, and the refusal reaches the effect's code as
:class:`~ledgerflow.errors.AttemptSupersededError`.

Two deadlines follow from the writes. The driver's own (:attr:`AttemptHeartbeats.deadline`, on
the engine's clock, measured from when each write was sent) cuts off an attempt whose code is
alive but silent: :func:`~ledgerflow.runtime.calls.call_by_deadline` cancels it and its outcome
is UNKNOWN. The store's (``heartbeat_due_at``, on the clock leases are measured by) covers a
worker that stopped altogether: a claim takes the instance over before the owner's lease runs
out, and recovery makes the outcome UNKNOWN (:mod:`ledgerflow.runtime.effects`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import AttemptSupersededError, PayloadError, StorageError
from ledgerflow.ledger.records import EffectHeartbeat
from ledgerflow.model.definition import EffectCall, EffectDeclaration, EffectFunction
from ledgerflow.model.heartbeat import HeartbeatAnswer, throttle_seconds
from ledgerflow.model.ids import EffectId, StepSeq
from ledgerflow.runtime import faults
from ledgerflow.runtime.control import Abandon, LostOwnership
from ledgerflow.runtime.session import Session

_KEEP = object()  # no details given since the last write


class AttemptHeartbeats:
    """The heartbeats of attempt ``attempt`` of one effect (see the module's docstring)."""

    def __init__(
        self,
        session: Session,
        *,
        seq: StepSeq,
        effect_id: EffectId,
        attempt: int,
        timeout_seconds: float,
    ) -> None:
        self.session = session
        self.seq = seq
        self.effect_id = effect_id
        self.attempt = attempt
        self.timeout_seconds = timeout_seconds
        self.throttle_seconds = throttle_seconds(timeout_seconds)
        self.deadline = session.clock.now() + timeout_seconds
        self.writes = 0
        self._written_at: float | None = None
        self._pending: Any = _KEEP

    def _store_now(self) -> float | None:
        """The write's time on the clock leases are measured by (None: the database's)."""
        clock = self.session.clock
        if self.session.store.database_clock and clock.real_time:
            return None
        return clock.now()

    async def open(self) -> None:
        """The beat at dispatch: the attempt is alive from now (the last details stay)."""
        await self._write(None)

    async def beat(self, details: Any) -> HeartbeatAnswer:
        text = self.session.codec.encode(details)
        if len(text.encode()) > limits.HEARTBEAT_DETAILS_BYTES_MAX:
            raise PayloadError(
                f"heartbeat details of {len(text.encode())} bytes are past the bound of "
                f"{limits.HEARTBEAT_DETAILS_BYTES_MAX}"
            )
        now = self.session.clock.now()
        written = False
        if self._written_at is None or now - self._written_at >= self.throttle_seconds:
            try:
                await self._write(text)
                written = True
            except Abandon as exc:
                if not isinstance(exc.__cause__, StorageError):
                    raise
                # The store did not answer this time: the details wait for the next write,
                # and the deadline stays where the last durable heartbeat put it.
                self._pending = text
        else:
            self._pending = text
        return HeartbeatAnswer(cancel_requested=self.session.cancel_requested, written=written)

    async def flush(self) -> None:
        """Write the details kept by the throttle (the effect raised: the next attempt reads
        them). A refusal changes nothing here: the effect's own error is what is recorded."""
        if self._pending is _KEEP:
            return
        with contextlib.suppress(AttemptSupersededError, Abandon):
            await self._write(self._pending)

    async def _write(self, details: str | None) -> None:
        sent_at = self.session.clock.now()
        write = EffectHeartbeat(
            effect_id=self.effect_id,
            seq=self.seq,
            attempt=self.attempt,
            timeout_seconds=self.timeout_seconds,
            details=details,
            at=self._store_now(),
        )
        if faults.plan is not None:
            faults.point("effect.before_heartbeat", **self._where())
        # Shielded: an attempt cut off (cancelled) while its heartbeat is being committed still
        # sees the commit through, so the journal this session keeps holds the details the
        # store holds, and the next attempt reads those (never older ones).
        commit = asyncio.ensure_future(self.session.commit(write))
        commit.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            await asyncio.shield(commit)
        except LostOwnership:
            raise AttemptSupersededError(
                f"effect {self.effect_id}: attempt {self.attempt} is no longer this worker's "
                "(another owner holds the instance)",
                instance_id=self.session.instance_id,
                effect_id=self.effect_id,
                attempt=self.attempt,
            ) from None
        self.writes += 1
        self._written_at = sent_at
        self._pending = _KEEP
        self.deadline = sent_at + self.timeout_seconds
        if faults.plan is not None:
            faults.point("effect.after_heartbeat", **self._where())

    def _where(self) -> dict[str, Any]:
        return {
            "instance": self.session.instance.business_key,
            "seq": abs(self.seq),
            "attempt": self.attempt,
            "writes": self.writes,
        }


async def dispatch_heartbeats(
    session: Session,
    declaration: EffectDeclaration,
    *,
    seq: StepSeq,
    effect_id: EffectId,
    attempt: int,
) -> AttemptHeartbeats | None:
    """An attempt's heartbeats, its first one written now (at dispatch), for an effect declared
    with a heartbeat timeout; None otherwise."""
    timeout = declaration.heartbeat_timeout_seconds
    if timeout is None:
        return None
    beats = AttemptHeartbeats(
        session, seq=seq, effect_id=effect_id, attempt=attempt, timeout_seconds=timeout
    )
    await beats.open()
    return beats


def flushing(function: EffectFunction, beats: AttemptHeartbeats | None) -> EffectFunction:
    """The effect's function, writing the heartbeat details the throttle kept when it raises
    (before its outcome is recorded: the next attempt reads them)."""
    if beats is None:
        return function

    async def flushed(call: EffectCall) -> Any:
        try:
            return await function(call)  # an async def: heartbeat_timeout requires one
        except Exception:
            await beats.flush()
            raise

    return flushed
