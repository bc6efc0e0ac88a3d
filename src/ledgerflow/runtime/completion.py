"""Asynchronous effects: waiting, durably, for the participant's completion callback
(internal).

A participant that completes by callback only accepts the dispatch; the effect is ACCEPTED and
the instance WAITING until the callback is delivered to the effect's step (through the inbox,
so it is deduplicated and a late one is refused), or until the deadline, after which the
outcome is UNKNOWN and settled like any other. The effect driver hands this part to a
:class:`CallbackCompletion`, which writes through the driver's
:class:`~ledgerflow.runtime.effect_writes.EffectWrites` and answers with the driver's next move
(:mod:`~ledgerflow.runtime.effect_moves`): settled, or resolve the UNKNOWN outcome. It never
calls back into the driver.
"""

from __future__ import annotations

from typing import Any

from ledgerflow.errors import EventArrivedError
from ledgerflow.ledger.records import ConsumeDelivery, Delivery, NoPendingDelivery, Write
from ledgerflow.ledger.transitions import instance_change
from ledgerflow.model.effect import EffectEvent
from ledgerflow.model.ids import EffectId
from ledgerflow.model.instance import InstanceEvent
from ledgerflow.model.step import StepEvent
from ledgerflow.runtime import faults
from ledgerflow.runtime.control import Park, Waiting
from ledgerflow.runtime.effect_moves import Move, Resolve, Settled
from ledgerflow.runtime.effect_writes import EffectWrites


def completion_event(effect: EffectId) -> str:
    """The inbox name under which a participant's callback completes an asynchronous effect."""
    return f"complete:{effect}"


class CallbackCompletion:
    """Waits, durably, for one asynchronous effect's callback on behalf of its driver."""

    def __init__(self, driver: EffectWrites) -> None:
        self.driver = driver

    async def await_completion(self, *, attempt: int) -> Move:
        """Wait (durably, WAITING) for the participant's callback; no callback by the
        deadline makes the outcome UNKNOWN, which the driver then resolves as any other."""
        driver, s = self.driver, self.driver.session
        name = completion_event(driver.effect_id)
        step = s.step(driver.seq)
        due = step.next_attempt_at if step and step.next_attempt_at else s.clock.now()
        while True:
            found = await s.store.pending_deliveries(s.instance_id, name)
            if found:
                return await self._completed(found[0], attempt=attempt)
            if s.clock.now() < due:
                # An arrival between the read above and this park makes the park due at once.
                if faults.plan is not None:
                    faults.point(
                        "effect.before_suspend", instance=s.instance.business_key, seq=driver.seq
                    )
                # Inside parallel branches the wait is held until every branch is blocked,
                # then one commit parks the instance for all of them (runtime/branches.py).
                what = f"step {driver.seq} ({driver.name})"
                if driver.parks is not None and await driver.parks(
                    driver.seq, what, [], due, self._suspend
                ):
                    raise Waiting  # never reached: parks raises it once the instance waits
                await self._suspend([], due, what)
                raise Waiting
            # The deadline passed with no callback read: the commit below proves none arrived.
            if faults.plan is not None:
                faults.point(
                    "effect.before_deadline", instance=s.instance.business_key, seq=driver.seq
                )
            try:
                await s.commit(
                    NoPendingDelivery(name=name),
                    driver.effect_write(
                        EffectEvent.LOSE_OUTCOME,
                        attempt=attempt,
                        doubt=attempt,
                        reason="no completion callback before the deadline",
                    ),
                )
            except EventArrivedError:
                continue  # The callback won the race.
            return Resolve()

    async def _suspend(self, writes: list[Write], due: float, reason: str) -> None:
        s = self.driver.session
        await s.commit(
            *writes,
            instance_change(
                s.status,
                InstanceEvent.SUSPEND,
                reason_code="awaiting_callback",
                reason=reason,
                release=True,
                available_at=due,
            ),
        )

    async def _completed(self, delivery: Delivery, *, attempt: int) -> Move:
        driver, s = self.driver, self.driver.session
        body = s.codec.decode(delivery.payload)
        consume = ConsumeDelivery(event_id=delivery.event_id, seq=driver.seq)
        dead = body.get("dead_letter")
        if dead is not None:
            # The broker gave up delivering the request: it may have been applied by a
            # consumer that died before its ack, so only a person can settle it.
            reason = f"the broker dead-lettered the request: {s.codec.encode(dead)}"[:500]
            await s.commit(
                consume,
                driver.effect_write(
                    EffectEvent.LOSE_OUTCOME, attempt=attempt, doubt=attempt, reason=reason
                ),
            )
            raise Park("effect_outcome_unknown", f"step {driver.seq} ({driver.name}): {reason}")
        if body.get("applied"):
            evidence = s.codec.encode(body.get("evidence"))
            await s.commit(
                consume,
                driver.effect_write(
                    EffectEvent.CONFIRM,
                    attempt=attempt,
                    evidence=evidence,
                    detail=f"callback {delivery.event_id}{_answered(body)}",
                ),
                driver.step_write(StepEvent.COMPLETE, attempt=attempt, output=evidence),
            )
            return Settled(s.codec.decode(evidence))
        reason = f"the participant called back: not applied ({body.get('reason')})"[:500]
        effect = s.effect(driver.seq)
        if effect is not None and effect.doubt:
            await s.commit(
                consume,
                driver.effect_write(
                    EffectEvent.LOSE_OUTCOME,
                    attempt=attempt,
                    reason=f"{reason}, but attempt {effect.doubt} is in doubt",
                ),
            )
            return Resolve()
        await s.commit(
            consume,
            driver.effect_write(EffectEvent.REJECT_FINAL, attempt=attempt, reason=reason),
            driver.step_write(
                StepEvent.FAIL, attempt=attempt, error=s.codec.encode({"message": reason})
            ),
        )
        raise driver.failed(reason)


def _answered(body: dict[str, Any]) -> str:
    """The dispatch a broker reply says it answers, for the confirm's record."""
    answered = body.get("answered")
    if not isinstance(answered, dict):
        return ""
    return f" (attempt {answered.get('attempt')}, generation {answered.get('generation')})"
