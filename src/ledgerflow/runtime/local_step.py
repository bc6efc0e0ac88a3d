"""A local step, driven through its attempts for one instance (internal).

A local step computes in the worker: it runs at least once (again after a crash before its
result was journaled) and its result is journaled exactly once. A failed attempt that the
policy retries is journaled with the next attempt's due time, so a crash during the backoff
resumes the same schedule.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ledgerflow.errors import PayloadError, StepFailedError
from ledgerflow.model import detection
from ledgerflow.model.attempts import with_attempt_error
from ledgerflow.model.ids import StepSeq, command_id
from ledgerflow.model.retry import RetryPolicy
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.calls import call_user, describe_error, error_names
from ledgerflow.runtime.control import Park
from ledgerflow.runtime.session import Session
from ledgerflow.storage.records import StepRecord, StepWrite


@dataclass(slots=True, kw_only=True)
class LocalStepDriver:
    session: Session
    seq: StepSeq
    name: str
    input_text: str
    policy: RetryPolicy
    wait_until: Callable[[float | None], Awaitable[None]]

    async def run(
        self,
        function: Callable[..., Any],
        args: Sequence[Any],
        *,
        attempt: int,
        expected: StepStatus,
    ) -> Any:
        where = {"instance": self.session.instance.business_key, "seq": self.seq}
        while True:
            faults.point("step.before_execute", attempt=attempt, **where)
            try:
                value = await call_user(function, *args, inline=self.session.store.inline)
                output = self.session.codec.encode(value)
            except Exception as exc:  # noqa: BLE001 - any error of user code is journaled.
                attempt = await self._failed(exc, attempt=attempt, expected=expected)
                expected = StepStatus.RETRY_SCHEDULED
                continue
            faults.point("step.after_execute", attempt=attempt, **where)
            await self._write(StepStatus.COMPLETED, expected, attempt=attempt, output=output)
            return self.session.codec.decode(output)

    async def _failed(self, exc: Exception, *, attempt: int, expected: StepStatus) -> int:
        """Journal a failed attempt; return the next attempt, or raise when none is left."""
        retryable = not isinstance(exc, PayloadError) and self.policy.retries(error_names(exc))
        described = self._described(exc, expected)
        error = self.session.codec.encode(described)
        recorded = self.session.step(self.seq)
        errors = with_attempt_error(
            recorded.attempt_errors if recorded else None,
            attempt=attempt,
            error=describe_error(exc),
            at=self.session.clock.now(),
        )
        if retryable and attempt < self.policy.attempts_max:
            following = attempt + 1
            identity = command_id(self.session.instance_id, self.session.instance.run, self.seq)
            pause = self.policy.delay_before(following, identity=identity)
            due = self.session.clock.now() + pause.total_seconds()
            await self._write(
                StepStatus.RETRY_SCHEDULED,
                expected,
                attempt=following,
                error=error,
                due=due,
                attempt_errors=errors,
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
        await self._write(
            StepStatus.FAILED, expected, attempt=attempt, error=error, attempt_errors=errors
        )
        raise StepFailedError(
            f"step {self.name!r} failed after {attempt} attempt(s): {exc}",
            instance_id=self.session.instance_id,
            seq=self.seq,
        ) from exc

    def _described(self, exc: Exception, expected: StepStatus) -> dict[str, Any]:
        """The error as journaled, with how many attempts in a row ended with it."""
        described = describe_error(exc)
        recorded = self.session.step(self.seq)
        previous = None
        if expected is StepStatus.RETRY_SCHEDULED and recorded is not None and recorded.error:
            decoded = self.session.codec.decode(recorded.error)
            previous = decoded if isinstance(decoded, dict) else None
        described["repeated"] = detection.failure_streak(previous, described)
        return described

    async def _write(
        self,
        status: StepStatus,
        expected: StepStatus,
        *,
        attempt: int,
        output: str | None = None,
        error: str | None = None,
        due: float | None = None,
        attempt_errors: str | None = None,
    ) -> None:
        session = self.session
        if attempt_errors is None:
            recorded = session.step(self.seq)
            attempt_errors = recorded.attempt_errors if recorded else None
        record = StepRecord(
            instance_id=session.instance_id,
            run=session.instance.run,
            seq=self.seq,
            kind=StepKind.LOCAL,
            name=self.name,
            command_id=command_id(session.instance_id, session.instance.run, self.seq),
            status=status,
            attempt=attempt,
            input=self.input_text,
            output=output,
            error=error,
            retry_policy=session.codec.encode(self.policy.to_record()),
            next_attempt_at=due,
            generation=session.generation,
            updated_at=session.clock.now(),
            attempt_errors=attempt_errors,
        )
        await session.commit(StepWrite(record=record, expected=expected))
