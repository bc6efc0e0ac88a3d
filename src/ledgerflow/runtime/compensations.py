"""Runs a failed instance's compensations to a truthful end (internal).

Entering COMPENSATING records the whole plan in one commit with the status change: one PLANNED
compensation per CONFIRMED effect that can be undone, at the negative of its step's position.
Each then runs in reverse step order through the effect protocol, under its own key and retry
policy. All done (applied, or already reflected by the participant's state): COMPENSATED. A
compensation that cannot finish, or an effect only a person can undo: MANUAL_INTERVENTION
with the reason, never COMPENSATED.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledgerflow import limits
from ledgerflow.errors import EffectFailedError, RegistrationError
from ledgerflow.ledger.records import EffectRecord, EffectWrite, InstanceWrite, StepRecord
from ledgerflow.ledger.transitions import instance_change, new_effect
from ledgerflow.model.classification import Classification
from ledgerflow.model.compensation import ConfirmedEffect, Plan, compensation_seq, plan
from ledgerflow.model.definition import EffectDeclaration, Registry
from ledgerflow.model.effect import EffectEvent, EffectState
from ledgerflow.model.ids import StepSeq, compensation_key, effect_id
from ledgerflow.model.instance import InstanceEvent, InstanceStatus
from ledgerflow.runtime import child_compensations
from ledgerflow.runtime.child_compensations import ChildObligation
from ledgerflow.runtime.control import Park
from ledgerflow.runtime.effects import EffectDriver
from ledgerflow.runtime.session import Session


def history_position(run: int, seq: StepSeq) -> StepSeq:
    """An effect's place in the instance's whole history, runs one after another (each run
    journals at most ``limits.STEPS_PER_INSTANCE_MAX`` steps): on run 1 its step's own
    position, so a chain's compensations run in reverse order across its runs too."""
    return StepSeq((run - 1) * limits.STEPS_PER_INSTANCE_MAX + seq)


class CompensationRunner:
    """``carried``: the effects earlier runs of the instance committed (continue-as-new keeps
    them the instance's obligations); they are planned and undone with the open run's own.
    ``carried_steps``: those runs' steps, whose succeeded children with a compensating workflow
    are obligations too (runtime/child_compensations.py)."""

    def __init__(
        self,
        session: Session,
        registry: Registry,
        *,
        carried: Sequence[EffectRecord] = (),
        carried_steps: Sequence[StepRecord] = (),
    ) -> None:
        self.session = session
        self.registry = registry
        self.carried = tuple(carried)
        self.carried_steps = tuple(carried_steps)

    def children(self) -> dict[StepSeq, ChildObligation]:
        """The succeeded children to undo, by the negative of their place in the history."""
        steps = [*self.carried_steps, *self.session.journal.steps.values()]
        placed = [(history_position(s.run, s.seq), s) for s in steps]
        found = child_compensations.obligations(self.session, placed)
        return {compensation_seq(c.position): c for c in found}

    def _undoes_children(self) -> bool:
        """Whether this compensation undoes children: a failure's always; a cancellation's
        when it asked to undo and no forward-recovery-only effect stands (as its plan says
        for effects, from the ledger, so every resume answers the same)."""
        if self.session.status is not InstanceStatus.CANCELLING:
            return True
        pivot = any(
            e.state is EffectState.CONFIRMED
            and e.classification == Classification.FORWARD_RECOVERY_ONLY.value
            for e in self._originals()
        )
        return self.session.instance.cancel_compensate and not pivot

    def _by_position(self) -> dict[StepSeq, EffectRecord]:
        """Every original effect of the instance (earlier runs' and this run's) by its place
        in the whole history."""
        effects = [*self.carried, *(e for s, e in self.session.journal.effects.items() if s > 0)]
        return {history_position(e.run, e.seq): e for e in effects}

    def _originals(self) -> list[EffectRecord]:
        return [e for _, e in sorted(self._by_position().items())]

    def _declaration(self, effect: EffectRecord) -> EffectDeclaration | None:
        try:
            return self.registry.effect(effect.participant, effect.operation)
        except RegistrationError:
            return None

    def plan(self) -> Plan:
        """The plan from the ledger: the same answer on every resume."""
        described = []
        for effect in self._originals():
            declaration = self._declaration(effect)
            described.append(
                ConfirmedEffect(
                    seq=history_position(effect.run, effect.seq),
                    participant=effect.participant,
                    operation=effect.operation,
                    classification=Classification(effect.classification),
                    state=effect.state,
                    compensation=declaration.compensation if declaration else None,
                )
            )
        return plan(described)

    async def begin(
        self, why: str, *, cause: str, cancelling: bool = False, undo: bool = True
    ) -> None:
        """RUNNING -> COMPENSATING (or CANCELLING), with every planned compensation, in one
        commit. ``undo=False`` (a cancellation that keeps what was done) plans none. ``cause``
        is kept to the end, whatever the compensations' own outcome."""
        chosen = self.plan()
        event = InstanceEvent.CANCEL if cancelling else InstanceEvent.FAIL_AFTER_EFFECTS
        planned = chosen.compensate if undo else ()
        kids = len(self.children()) if undo else 0
        also = f" and {kids} child(ren)" if kids else ""
        writes: list[EffectWrite | InstanceWrite] = [
            instance_change(
                self.session.status,
                event,
                reason_code="cancelling" if cancelling else "compensating",
                reason=f"{why}; compensating {len(planned)} effect(s){also}",
                cause=cause,
            )
        ]
        originals = self._by_position()
        for item in planned:
            writes.append(self._planned(originals[item.seq], item.compensation or ""))
        await self.session.commit(*writes)

    def _planned(self, original: EffectRecord, operation: str) -> EffectWrite:
        """A compensation's place in the plan: its own identity, at the negative of the original
        step's position, and its own key in the compensation namespace."""
        instance = self.session.instance
        seq = compensation_seq(history_position(original.run, original.seq))
        return new_effect(
            instance,
            seq,
            EffectEvent.PLAN,
            effect_id=effect_id(instance.instance_id, instance.run, seq),
            participant=original.participant,
            operation=operation,
            classification=Classification.FORWARD_RECOVERY_ONLY.value,
            idempotency_key=compensation_key(original.idempotency_key),
            payload=original.payload,
            now=self.session.clock.now(),
            reason=f"undoes {original.participant}.{original.operation}",
            compensates=original.effect_id,
            detail="planned",
            # It sends the original's payload: the contract that payload was written under.
            contract_version=original.contract_version,
        )

    async def run(self) -> None:
        """Drive every planned compensation, in order, then record the truthful end."""
        journal = self.session.journal
        originals = self._by_position()
        kids = self.children() if self._undoes_children() else {}
        undone_children = []
        for seq in sorted({*(s for s in journal.effects if s < 0), *kids}):
            if seq in kids:
                undone_children.append(
                    await child_compensations.undo(self.session, self.registry, kids[seq], seq)
                )
                continue
            original = originals[compensation_seq(seq)]
            declaration = self._declaration(original)
            if declaration is None:
                raise Park(
                    "compensation_not_declared",
                    f"this worker does not know {original.participant}.{original.operation}",
                )
            undo = declaration.participant.compensation_of(declaration)
            driver = EffectDriver(
                session=self.session,
                declaration=undo,
                seq=seq,
                name=f"compensate {original.participant}.{original.operation}",
                payload_text=original.payload,
                wait_until=self.session.wait_until,
                undoes=original,
            )
            try:
                await driver.run()
            except EffectFailedError as exc:
                attempts = self.session.journal.effects[seq].attempt
                raise Park(
                    "compensation_failed",
                    f"{undo.participant.name}.{undo.operation} for {original.idempotency_key} "
                    f"could not finish after {attempts} attempt(s): {exc.message}",
                ) from None
        await self._finish(undone_children)

    async def _finish(self, undone_children: Sequence[str] = ()) -> None:
        cancelling = self.session.status is InstanceStatus.CANCELLING
        effects = self.session.journal.effects
        planned = {e.compensates for s, e in effects.items() if s < 0}
        leftover = [
            (e, why)
            for e, why in self.plan().for_operator
            # A cancellation lets accepted forward-only effects stand: they are its residue.
            if not (cancelling and e.classification is Classification.FORWARD_RECOVERY_ONLY)
        ]
        if leftover and (not cancelling or self.session.instance.cancel_compensate):
            raise Park(
                "compensation_needs_operator",
                "compensations ran; only a person can undo: "
                + "; ".join(
                    f"{e.participant}.{e.operation} (step {e.seq}): {why}" for e, why in leftover
                ),
            )
        undone = [e for s, e in effects.items() if s < 0]
        residual = [
            e
            for e in self._originals()
            if e.state is EffectState.CONFIRMED and e.effect_id not in planned
        ]
        summary = {
            "compensated": [f"{e.participant}.{e.operation}: {e.state.value}" for e in undone]
            + list(undone_children),
            "residual": [_residual(e, self.session.instance.run) for e in residual],
        }
        done = InstanceEvent.CANCELLATION_DONE if cancelling else InstanceEvent.COMPENSATIONS_DONE
        await self.session.commit(
            instance_change(
                self.session.status,
                done,
                result=self.session.codec.encode(summary) if cancelling else None,
                reason_code="cancelled" if cancelling else "compensated",
                reason=(self.session.reason or "")
                if cancelling
                else _compensated_reason(self.session.cause, summary["compensated"]),
                release=True,
            )
        )


def _compensated_reason(cause: str | None, compensated: list[str]) -> str:
    """What COMPENSATED says: the failure it answers, then what was undone."""
    undone = ", ".join(compensated) or "nothing to undo"
    return f"after {cause}; undone: {undone}" if cause else f"undone: {undone}"


def _residual(effect: EffectRecord, open_run: int) -> str:
    """A residual effect as a cancellation names it (its run too, when an earlier run's)."""
    where = f"step {effect.seq}"
    if effect.run != open_run:
        where = f"run {effect.run}, {where}"
    return f"{effect.participant}.{effect.operation} ({where})"
