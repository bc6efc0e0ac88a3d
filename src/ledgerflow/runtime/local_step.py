"""A local step, driven through its attempts for one instance (internal).

A local step computes in the worker: it runs at least once (again after a crash before its
result was journaled) and its result is journaled exactly once. A failed attempt that the
policy retries is journaled with the next attempt's due time, so a crash during the backoff
resumes the same schedule.

A result rides with the instance's next commit (the next step's, an effect's intent, a wait,
a child's start, the ending) rather than taking a commit of its own, unless the step asks for
a checkpoint: that is what running at least once already allows, and three steps and an
ending become one transaction instead of four. Nothing outside the session learns of a
result before it is durable: every answer the engine gives is read from the store, and a
result that rides is written by the same transaction as anything decided from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ledgerflow.errors import PayloadError, StepFailedError
from ledgerflow.ledger.transitions import KEEP, StepIdentity, step_write
from ledgerflow.model import detection
from ledgerflow.model.attempts import with_attempt_error
from ledgerflow.model.defects import STEP_VERDICT
from ledgerflow.model.ids import StepSeq, command_id
from ledgerflow.model.retry import RetryPolicy
from ledgerflow.model.step import StepEvent, StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.calls import bounded_traceback, call_user, describe_error, error_names
from ledgerflow.runtime.control import Park
from ledgerflow.runtime.session import Session


@dataclass(slots=True, kw_only=True)
class LocalStepDriver:
    session: Session
    seq: StepSeq
    name: str
    input_text: str
    policy: RetryPolicy
    wait_until: Callable[[float | None], Awaitable[None]]
    # Whether an exception of the step's own code is a business failure of its workflow: the
    # verdict is journaled with the step's failure, so a replay decides as the run did.
    business: Callable[[BaseException], bool]
    # Make the result durable at once, in a commit of its own (``ctx.step(checkpoint=True)``):
    # for a step whose rerun after a crash costs more than a commit.
    checkpoint: bool = False

    async def run(
        self,
        function: Callable[..., Any],
        args: Sequence[Any],
        *,
        attempt: int,
    ) -> Any:
        where = {"instance": self.session.instance.business_key, "seq": self.seq}
        while True:
            if faults.plan is not None:
                faults.point("step.before_execute", attempt=attempt, **where)
            try:
                value = await call_user(function, *args, inline=self.session.store.inline)
                output = self.session.codec.encode(value)
            except Exception as exc:  # noqa: BLE001 - any error of user code is journaled.
                attempt = await self._failed(exc, attempt=attempt)
                continue
            if faults.plan is not None:
                faults.point("step.after_execute", attempt=attempt, **where)
            await self._write(
                StepEvent.COMPLETE, attempt=attempt, output=output, ride=not self.checkpoint
            )
            return self.session.codec.decode(output)

    async def _failed(self, exc: Exception, *, attempt: int) -> int:
        """Journal a failed attempt; return the next attempt, or raise when none is left."""
        retryable = not isinstance(exc, PayloadError) and self.policy.retries(error_names(exc))
        described = self._described(exc)
        error = self.session.codec.encode(described)
        recorded = self.session.step(self.seq)
        errors = with_attempt_error(
            recorded.attempt_errors if recorded else None,
            attempt=attempt,
            error=describe_error(exc),
            at=self.session.clock.now(),
        )
        trace = bounded_traceback(exc)
        if retryable and attempt < self.policy.attempts_max:
            following = attempt + 1
            identity = command_id(self.session.instance_id, self.session.instance.run, self.seq)
            pause = self.policy.delay_before(following, identity=identity)
            due = self.session.clock.now() + pause.total_seconds()
            await self._write(
                StepEvent.SCHEDULE_RETRY,
                attempt=following,
                error=error,
                due=due,
                attempt_errors=errors,
                error_traceback=trace,
            )
            if detection.is_poison_step(described["repeated"], self.session.detection):
                # The retry stays scheduled (a resume runs it), but not by itself: the same
                # failure again and again is a cause for a person, not for more attempts. The
                # streak is durable, so a crash before the park parks at the next failure.
                raise Park(
                    detection.POISON_STEP,
                    detection.poison_step_reason(
                        step=self.name, seq=self.seq, attempt=attempt, error=described
                    ),
                )
            await self.wait_until(due)
            return following
        business = self.business(exc)
        await self._write(
            StepEvent.FAIL,
            attempt=attempt,
            error=self.session.codec.encode({**described, STEP_VERDICT: business}),
            attempt_errors=errors,
            error_traceback=trace,
        )
        raise StepFailedError(
            f"step {self.name!r} failed after {attempt} attempt(s): {exc}",
            instance_id=self.session.instance_id,
            seq=self.seq,
            business=business,
        ) from exc

    def _described(self, exc: Exception) -> dict[str, Any]:
        """The error as journaled, with how many attempts in a row ended with it."""
        described = describe_error(exc)
        recorded = self.session.step(self.seq)
        previous = None
        if (
            recorded is not None
            and recorded.status is StepStatus.RETRY_SCHEDULED
            and recorded.error
        ):
            decoded = self.session.codec.decode(recorded.error)
            previous = decoded if isinstance(decoded, dict) else None
        described["repeated"] = detection.failure_streak(previous, described)
        return described

    async def _write(
        self,
        event: StepEvent,
        *,
        attempt: int,
        output: str | None = None,
        error: str | None = None,
        due: float | None = None,
        attempt_errors: str | None = None,
        error_traceback: str | None = None,
        ride: bool = False,
    ) -> None:
        """Journal this step moved by ``event`` (its first write, or a later one); with
        ``ride``, with the next commit when the session can carry it."""
        session = self.session
        identity = StepIdentity(
            instance=session.instance,
            seq=self.seq,
            kind=StepKind.LOCAL,
            name=self.name,
            input=self.input_text,
            retry_policy=session.codec.encode(self.policy.to_record()),
        )
        write = step_write(
            identity,
            session.step(self.seq),
            event,
            now=session.clock.now(),
            attempt=attempt,
            output=output,
            error=error,
            next_attempt_at=due,
            attempt_errors=KEEP if attempt_errors is None else attempt_errors,
            error_traceback=error_traceback,
        )
        if ride and session.ride_step(write):
            return
        await session.commit(write)
