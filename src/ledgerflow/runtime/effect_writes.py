"""What one effect's driver writes to the journal: its step and its ledger row (internal).

The protocol in :mod:`ledgerflow.runtime.effects` decides *when* an effect moves; this part
says *what* each move writes, so every write of an effect is built the same way: its event
named, its target computed by :mod:`ledgerflow.ledger.transitions`.
"""

from __future__ import annotations

from ledgerflow.errors import EffectFailedError
from ledgerflow.ledger.records import EffectWrite, StepWrite
from ledgerflow.ledger.transitions import (
    KEEP,
    StepIdentity,
    effect_change,
    new_effect,
    step_write,
)
from ledgerflow.model.attempts import with_attempt_error
from ledgerflow.model.definition import EffectDeclaration
from ledgerflow.model.effect import EffectEvent
from ledgerflow.model.ids import EffectId, IdempotencyKey, StepSeq
from ledgerflow.model.step import StepEvent
from ledgerflow.runtime.calls import describe_error
from ledgerflow.runtime.session import Session
from ledgerflow.runtime.waits import Parks


class EffectWrites:
    """The writes of one effect; the driver that subclasses it sets these attributes."""

    session: Session
    declaration: EffectDeclaration
    seq: StepSeq
    # The step's name, as the workflow gave it.
    name: str
    effect_id: EffectId
    key: IdempotencyKey
    payload_text: str
    step_identity: StepIdentity
    # How a callback's wait is held among parallel branches (runtime/branches.py); None:
    # the wait parks the instance on its own.
    parks: Parks | None = None

    def failed(self, reason: str) -> EffectFailedError:
        return EffectFailedError(
            f"effect {self.declaration.participant.name}.{self.declaration.operation} "
            f"failed: {reason}",
            instance_id=self.session.instance_id,
            effect_id=self.effect_id,
        )

    def step_write(
        self,
        event: StepEvent,
        *,
        attempt: int,
        output: str | None = None,
        error: str | None = None,
        next_attempt_at: float | None = None,
    ) -> StepWrite:
        """This step moved by ``event``; its output, error and due time are what is given."""
        return step_write(
            self.step_identity,
            self.session.step(self.seq),
            event,
            now=self.session.clock.now(),
            attempt=attempt,
            output=output,
            error=error,
            next_attempt_at=next_attempt_at,
        )

    def effect_write(
        self,
        event: EffectEvent,
        *,
        attempt: int,
        evidence: str | None = None,
        reason: str | None = None,
        detail: str | None = None,
        doubt: int | None = None,
        lookup_failures: int = 0,
        failed: tuple[int, BaseException] | None = None,
    ) -> EffectWrite:
        """This effect moved by ``event``. The reason explains the new state only (the timeline
        keeps every earlier one); ``failed`` (attempt, error) adds that attempt's error to the
        ones it keeps; lookups that could not be asked count only while in a row."""
        session = self.session
        now = session.clock.now()
        current = session.effect(self.seq)
        if current is None:
            return new_effect(
                session.instance,
                self.seq,
                event,
                effect_id=self.effect_id,
                participant=self.declaration.participant.name,
                operation=self.declaration.operation,
                classification=self.declaration.classification.value,
                idempotency_key=self.key,
                payload=self.payload_text,
                now=now,
                reason=reason,
                detail=detail,
                contract_version=self.declaration.contract_version,
            )
        errors = current.attempt_errors
        if failed is not None:
            errors = with_attempt_error(
                errors, attempt=failed[0], error=describe_error(failed[1]), at=now
            )
        return effect_change(
            current,
            event,
            now=now,
            generation=session.generation,
            attempt=attempt,
            doubt=KEEP if doubt is None else doubt,
            evidence=evidence,
            reason=reason,
            attempt_errors=errors,
            lookup_failures=lookup_failures,
            detail=detail,
        )
