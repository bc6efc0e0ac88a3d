"""Asynchronous effects: waiting, durably, for the participant's completion callback
(internal).

A participant that completes by callback only accepts the dispatch; the effect is ACCEPTED and
the instance WAITING until the callback is delivered to the effect's step (through the inbox,
so it is deduplicated and a late one is refused), or until the deadline, after which the
outcome is UNKNOWN and settled like any other. The effect driver inherits this part.
"""

from __future__ import annotations

from typing import Any

from ledgerflow.errors import EffectFailedError, EventArrivedError
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import EffectId, StepSeq
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.step import StepStatus
from ledgerflow.runtime.control import Waiting
from ledgerflow.runtime.session import Session
from ledgerflow.storage.records import (
    ConsumeDelivery,
    Delivery,
    EffectWrite,
    InstanceWrite,
    NoPendingDelivery,
    StepWrite,
)


def completion_event(effect: EffectId) -> str:
    """The inbox name under which a participant's callback completes an asynchronous effect."""
    return f"complete:{effect}"


class CallbackCompletion:
    """The callback half of :class:`~ledgerflow.runtime.effects.EffectDriver`."""

    session: Session
    seq: StepSeq
    name: str
    effect_id: EffectId

    def _effect(
        self,
        state: EffectState,
        expected: EffectState,
        *,
        attempt: int,
        evidence: str | None = None,
        reason: str | None = None,
        detail: str | None = None,
        doubt: int | None = None,
    ) -> EffectWrite:
        raise NotImplementedError

    def _step(
        self,
        status: StepStatus,
        expected: StepStatus,
        *,
        attempt: int,
        output: str | None = None,
        error: str | None = None,
        next_attempt_at: float | None = None,
    ) -> StepWrite:
        raise NotImplementedError

    async def _resolve(self) -> Any:
        raise NotImplementedError

    def _failed(self, reason: str) -> EffectFailedError:
        raise NotImplementedError

    async def _await_completion(self, *, attempt: int) -> Any:
        """Wait (durably, WAITING) for the participant's callback; no callback by the
        deadline makes the outcome UNKNOWN, settled like any other."""
        s = self.session
        name = completion_event(self.effect_id)
        step = s.step(self.seq)
        due = step.next_attempt_at if step and step.next_attempt_at else s.clock.now()
        while True:
            found = await s.store.pending_deliveries(s.instance_id, name)
            if found:
                return await self._completed(found[0], attempt=attempt)
            if s.clock.now() < due:
                await s.commit(
                    InstanceWrite(
                        status=InstanceStatus.WAITING,
                        expected=s.status,
                        reason_code="awaiting_callback",
                        reason=f"step {self.seq} ({self.name})",
                        release=True,
                        available_at=due,
                    )
                )
                raise Waiting
            try:
                await s.commit(
                    NoPendingDelivery(name=name),
                    self._effect(
                        EffectState.UNKNOWN,
                        EffectState.ACCEPTED,
                        attempt=attempt,
                        doubt=attempt,
                        reason="no completion callback before the deadline",
                    ),
                )
            except EventArrivedError:
                continue  # The callback won the race.
            return await self._resolve()

    async def _completed(self, delivery: Delivery, *, attempt: int) -> Any:
        s = self.session
        body = s.codec.decode(delivery.payload)
        consume = ConsumeDelivery(event_id=delivery.event_id, seq=self.seq)
        if body.get("applied"):
            evidence = s.codec.encode(body.get("evidence"))
            await s.commit(
                consume,
                self._effect(
                    EffectState.CONFIRMED,
                    EffectState.ACCEPTED,
                    attempt=attempt,
                    evidence=evidence,
                    detail=f"callback {delivery.event_id}",
                ),
                self._step(
                    StepStatus.COMPLETED, StepStatus.STARTED, attempt=attempt, output=evidence
                ),
            )
            return s.codec.decode(evidence)
        reason = f"the participant called back: not applied ({body.get('reason')})"[:500]
        effect = s.effect(self.seq)
        if effect is not None and effect.doubt:
            await s.commit(
                consume,
                self._effect(
                    EffectState.UNKNOWN,
                    EffectState.ACCEPTED,
                    attempt=attempt,
                    reason=f"{reason}, but attempt {effect.doubt} is in doubt",
                ),
            )
            return await self._resolve()
        await s.commit(
            consume,
            self._effect(EffectState.FAILED, EffectState.ACCEPTED, attempt=attempt, reason=reason),
            self._step(
                StepStatus.FAILED,
                StepStatus.STARTED,
                attempt=attempt,
                error=s.codec.encode({"message": reason}),
            ),
        )
        raise self._failed(reason)
