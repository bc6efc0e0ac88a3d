"""Reconciliation as data: what the ledger claims, what the participant says, what to do (pure).

A reconciler compares an effect's ledger state with the participant's own answer to its lookup
by idempotency key. :data:`DECISIONS` is the whole rule, one row per pair, and
:func:`decide` reads it. Only one difference is corrected without a person: the ledger is in
doubt (UNKNOWN) and the participant proves the effect applied. That correction is exactly what
the engine itself does when its lookup answers ``applied`` (it adds a fact the ledger lacked and
takes nothing back), so it is safe to make unattended. Every other difference would change what
the business sees (re-apply a lost effect, fail a step, start compensations): it is handed to a
person with the evidence, never acted on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ledgerflow.model.effect import EffectState, LookupVerdict

# Reason codes of the attention flags the reconciler raises (documented in docs/operators.md).
# The participant's facts contradict a terminal ledger state (lost, or applied behind a FAILED).
EFFECT_DRIFT = "effect_drift"
# A parked effect in doubt that the participant says it never applied: settling it decides the
# business outcome (try again, or fail and compensate), which is a person's call.
RECONCILE_NOT_APPLIED = "reconcile_not_applied"
# A correction the repair command refused (stale, not authorized, a live worker holds it).
RECONCILE_REFUSED = "reconcile_refused"

# Ledger states a run compares: settled ones (to find drift) and doubt (to settle it).
COMPARED_STATES = frozenset({EffectState.CONFIRMED, EffectState.FAILED, EffectState.UNKNOWN})


class Action(enum.Enum):
    MATCH = "matched"
    CORRECT = "corrected"
    ESCALATE = "escalated"
    # The participant could not tell (its lookup answered unknown, failed or timed out).
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    action: Action
    # The attention flag an escalation raises; None otherwise.
    reason_code: str | None
    why: str


_S = EffectState
_V = LookupVerdict

DECISIONS: dict[tuple[EffectState, LookupVerdict], Decision] = {
    (_S.CONFIRMED, _V.APPLIED): Decision(
        action=Action.MATCH, reason_code=None, why="ledger and participant agree: applied"
    ),
    (_S.FAILED, _V.NOT_APPLIED): Decision(
        action=Action.MATCH, reason_code=None, why="ledger and participant agree: not applied"
    ),
    (_S.UNKNOWN, _V.APPLIED): Decision(
        action=Action.CORRECT,
        reason_code=None,
        why="participant reports applied: resolve the effect as applied with its evidence",
    ),
    (_S.UNKNOWN, _V.NOT_APPLIED): Decision(
        action=Action.ESCALATE,
        reason_code=RECONCILE_NOT_APPLIED,
        why=(
            "participant reports not applied (its lookup fenced the attempts so far): trying "
            "again or failing the step is a business decision"
        ),
    ),
    (_S.CONFIRMED, _V.NOT_APPLIED): Decision(
        action=Action.ESCALATE,
        reason_code=EFFECT_DRIFT,
        why="drift: the ledger says confirmed, the participant has no record of it",
    ),
    (_S.FAILED, _V.APPLIED): Decision(
        action=Action.ESCALATE,
        reason_code=EFFECT_DRIFT,
        why="drift: the ledger says failed, the participant reports it applied",
    ),
}


def decide(ledger: EffectState, verdict: LookupVerdict) -> Decision:
    """What a reconciler does about one effect, given the participant's verdict."""
    if ledger not in COMPARED_STATES:
        raise ValueError(f"reconciliation does not compare {ledger.value} effects")
    if verdict is LookupVerdict.UNKNOWN:
        return Decision(
            action=Action.UNREACHABLE, reason_code=None, why="the participant cannot tell"
        )
    return DECISIONS[(ledger, verdict)]
