"""How one effect's driver asks participant code, and its lookup above all (internal).

:mod:`ledgerflow.runtime.effects` decides what an effect's outcome means; this part owns the
asking: within the declaration's deadline, in a span, and the lookup's loop. A lookup that
gives no verdict (it could not be asked, or it answered that it cannot tell) is asked again on
the participant's ``lookup_retry``, each miss and its due time durable, so a crash or a long
pause resumes the same backoff; only when that policy is spent is the doubt settled without a
verdict (:func:`~ledgerflow.model.effect.resolve_unknown`).

A lookup may also learn when the key was first sent (``sent_at``, seconds since the epoch on
the engine's clock): a participant whose record of keys is complete only since some moment
(the kit after a purge, or a store recreated) needs it to tell "not applied" from "forgotten".
Only a lookup that names a ``sent_at`` parameter is given it, so every other keeps working.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ledgerflow.ledger.records import EffectRecord
from ledgerflow.model.effect import EffectEvent, LookupAnswer, LookupVerdict
from ledgerflow.model.step import StepEvent
from ledgerflow.runtime import faults
from ledgerflow.runtime.calls import call_by_deadline
from ledgerflow.runtime.effect_writes import EffectWrites
from ledgerflow.runtime.heartbeats import AttemptHeartbeats

# The lookup's keyword that receives the time the key was first sent.
SENT_AT = "sent_at"


class EffectAsks(EffectWrites):
    """The driver's questions to participant code; the driver subclasses it."""

    points: str
    wait_until: Callable[[float | None], Awaitable[None]]

    def _span(self, what: str, attempt: int) -> contextlib.AbstractContextManager[None]:
        """The span of a dispatch or lookup sent now (none without tracing)."""
        participant, operation = self.declaration.participant.name, self.declaration.operation
        return self.session.traced(
            f"ledgerflow.{what} {participant}.{operation}",
            step=self.seq,
            effect=self.effect_id,
            key=self.key,
            attempt=attempt,
            participant=participant,
            operation=operation,
        )

    def _where(self, attempt: int) -> dict[str, Any]:
        return {
            "instance": self.session.instance.business_key,
            "seq": abs(self.seq),
            "attempt": attempt,
            "operation": f"{self.declaration.participant.name}.{self.declaration.operation}",
        }

    async def _by_deadline(
        self,
        function: Callable[..., Any],
        *args: Any,
        on_late: Callable[[Any], None] | None = None,
        heartbeats: AttemptHeartbeats | None = None,
    ) -> Any:
        """Call participant code within the declaration's deadline (on the engine's clock),
        and within its heartbeat timeout of the last durable heartbeat when it has one."""
        return await call_by_deadline(
            function,
            *args,
            seconds=self.declaration.timeout_seconds,
            clock=self.session.clock,
            inline=self.session.store.inline,
            on_late=on_late,
            heartbeat_due=(lambda: heartbeats.deadline) if heartbeats is not None else None,
            heartbeat_seconds=self.declaration.heartbeat_timeout_seconds,
        )

    async def _sent_at(self) -> float | None:
        """When the effect's row was written (its intent, or a compensation's place in the
        plan): no attempt of its key was sent before. The timeline keeps it; the latest entry
        creating this position is this effect's own, or an earlier run's (earlier still)."""
        subject = f"effect:{self.seq}"
        entries = await self.session.store.timeline(self.session.instance_id)
        created = [e.at for e in entries if e.subject == subject and e.from_state == "NEW"]
        return created[-1] if created else None

    async def _ask(self, attempt: int) -> tuple[LookupAnswer | None, Exception | None]:
        """The participant's lookup answer (None without a lookup), or why it could not be
        asked: a lookup that raised gave no answer at all."""
        declared = self.declaration.participant.lookup_function
        if declared is None:
            return None, None
        lookup: Callable[..., Any] = declared
        if _takes_sent_at(lookup):
            lookup = functools.partial(lookup, sent_at=await self._sent_at())
        if faults.plan is not None:
            faults.point(f"{self.points}.before_lookup", **self._where(attempt))
        span = self._span("lookup", attempt)
        try:
            with span:
                answer = await self._by_deadline(lookup, self.key, attempt)
        except Exception as exc:  # noqa: BLE001 - no answer; asked again on its policy.
            return None, exc
        if not isinstance(answer, LookupAnswer):
            # Not an answer the protocol knows: the participant's bug. It counts as "cannot
            # tell", never as a verdict.
            return LookupAnswer.unknown(f"the lookup returned {type(answer).__name__}"), None
        return answer, None

    async def _lookup(self, effect: EffectRecord) -> tuple[LookupAnswer | None, str]:
        """The lookup's verdict, or when its policy is spent without one: its last "cannot
        tell" answer, or None (no lookup, or it could not be asked), with why."""
        policy = self.declaration.participant.lookup_retry
        while True:
            step = self.session.step(self.seq)
            if effect.lookup_failures and step is not None:
                await self.wait_until(step.next_attempt_at)  # the lookup's durable backoff
            answer, unavailable = await self._ask(effect.attempt)
            told = answer is not None and answer.verdict is not LookupVerdict.UNKNOWN
            if unavailable is None and (answer is None or told):
                return answer, ""
            misses = effect.lookup_failures + 1
            if unavailable is not None:
                event = EffectEvent.LOOKUP_UNAVAILABLE
                why = f"could not be asked: {type(unavailable).__name__}: {unavailable}"
            else:
                assert answer is not None  # an unknown verdict
                event = EffectEvent.LOOKUP_CANNOT_TELL
                why = "cannot tell" + (f": {answer.reason}" if answer.reason else "")
            if misses >= policy.attempts_max:
                spent = f"; the lookup gave no verdict {misses} times in a row, last: {why}"
                return (answer if unavailable is None else None), spent[:500]
            pause = policy.delay_before(misses + 1, identity=f"lookup:{self.key}")
            due = self.session.clock.now() + pause.total_seconds()
            await self.session.commit(
                self.effect_write(
                    event,
                    attempt=effect.attempt,
                    reason=f"lookup {misses} of {policy.attempts_max} {why}"[:500],
                    lookup_failures=misses,
                    failed=(effect.attempt, unavailable) if unavailable is not None else None,
                ),
                self.step_write(StepEvent.DEFER, attempt=effect.attempt, next_attempt_at=due),
            )
            effect = self.session.effect(self.seq) or effect


@functools.lru_cache(maxsize=256)
def _takes_sent_at(lookup: Callable[..., Any]) -> bool:
    """Whether the lookup names a ``sent_at`` parameter (it is then always given one)."""
    try:
        parameters = inspect.signature(lookup).parameters
    except (TypeError, ValueError):  # a builtin without a signature: never given it
        return False
    found = parameters.get(SENT_AT)
    return found is not None and found.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )
