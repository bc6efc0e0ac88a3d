"""Compensation: what to undo when a workflow fails, in which order, and whether it still may.

A compensation is a new effect with its own identity and failure modes, never time reversal.
:func:`plan` is the whole decision of what a failed instance undoes: only CONFIRMED effects,
in reverse step order, each through the compensating operation its declaration names; an
effect nobody can undo automatically goes to a person. A compensation's precondition is asked
against the participant's current business state before it is applied.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ledgerflow.model.classification import Classification
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import StepSeq


def compensation_seq(original: StepSeq) -> StepSeq:
    """Compensations are journaled at negative positions: they never meet workflow replay."""
    return StepSeq(-original)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfirmedEffect:
    """What planning needs to know of one effect of the failed run."""

    seq: StepSeq
    participant: str
    operation: str
    classification: Classification
    state: EffectState
    compensation: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Compensations to run, in order, and effects only a person can undo."""

    compensate: tuple[ConfirmedEffect, ...]
    for_operator: tuple[tuple[ConfirmedEffect, str], ...]


def plan(effects: Iterable[ConfirmedEffect]) -> Plan:
    """Plan the compensations of a failed instance: only confirmed effects are undone."""
    chosen: list[ConfirmedEffect] = []
    for_operator: list[tuple[ConfirmedEffect, str]] = []
    for effect in sorted(effects, key=lambda e: e.seq, reverse=True):
        if effect.seq <= 0:
            continue
        if effect.state is not EffectState.CONFIRMED:
            continue
        if effect.classification is Classification.MANUAL_INTERVENTION:
            for_operator.append((effect, "classified manual-intervention"))
        elif effect.classification is Classification.FORWARD_RECOVERY_ONLY:
            for_operator.append((effect, "forward-recovery-only: cannot be undone"))
        elif effect.compensation is None:
            for_operator.append((effect, "no compensation is declared"))
        else:
            chosen.append(effect)
    return Plan(compensate=tuple(chosen), for_operator=tuple(for_operator))


class PreconditionVerdict(enum.Enum):
    HOLDS = "holds"
    SATISFIED = "satisfied"
    VIOLATED = "violated"


@dataclass(frozen=True, slots=True, kw_only=True)
class Precondition:
    """A participant's answer, before a compensation is applied, about its current state.

    - ``holds()``: apply the compensation.
    - ``satisfied(evidence)``: the state already reflects it (someone else refunded or released);
      it is not applied and counts as done, with that evidence.
    - ``violated(reason)``: it cannot be applied any more; an operator decides.
    """

    verdict: PreconditionVerdict
    evidence: Any = None
    reason: str = ""

    @classmethod
    def holds(cls) -> Precondition:
        """The participant's state allows the compensation: run it."""
        return cls(verdict=PreconditionVerdict.HOLDS)

    @classmethod
    def satisfied(cls, evidence: Any) -> Precondition:
        """The compensation's outcome already holds (``evidence`` says how): it is settled without
        running."""
        return cls(verdict=PreconditionVerdict.SATISFIED, evidence=evidence)

    @classmethod
    def violated(cls, reason: str) -> Precondition:
        """The participant's state forbids the compensation (``reason``): the instance goes to an
        operator."""
        return cls(verdict=PreconditionVerdict.VIOLATED, reason=reason)
