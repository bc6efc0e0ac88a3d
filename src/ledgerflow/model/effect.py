"""The effect protocol as data: effect states, lookup answers and how UNKNOWN is resolved.

An effect is INTENDED (write-ahead, committed before dispatch), then CONFIRMED with evidence,
FAILED (the participant proved nothing happened and no attempt is left) or UNKNOWN. UNKNOWN is
a first-class state, not an exception: it is resolved only by evidence (the participant's
lookup), by re-dispatch under the same key to a deduplicating participant that has not said it
cannot vouch for the key, or by an operator. :func:`resolve_unknown` is the whole decision, and
it never yields a fresh key.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ledgerflow.model.machine import Machine


class EffectState(enum.Enum):
    # No effect row exists before the intent; NEW stands for that absence in the table.
    NEW = "NEW"
    # A compensation recorded in the plan when the instance began compensating, not yet begun.
    PLANNED = "PLANNED"
    INTENDED = "INTENDED"
    # An asynchronous effect the participant accepted; it completes by callback.
    ACCEPTED = "ACCEPTED"
    UNKNOWN = "UNKNOWN"
    CONFIRMED = "CONFIRMED"
    FAILED = "FAILED"
    # A compensation not applied because the participant's state already reflects it (the
    # refund was made by someone else): its precondition said so, with evidence.
    SATISFIED = "SATISFIED"


class EffectEvent(enum.Enum):
    PLAN = "plan"
    SATISFY = "satisfy"
    INTEND = "intend"
    ACCEPT = "accept"
    CONFIRM = "confirm"
    REJECT_FINAL = "reject-final"
    LOSE_OUTCOME = "lose-outcome"
    # Dispatch again under the same key: after a proven failure with attempts left, or after a
    # lookup proved "not applied", or to a deduplicating participant after an UNKNOWN.
    REDISPATCH = "redispatch"
    # The participant's lookup could not be asked (unreachable): no answer, still UNKNOWN, and
    # the lookup is asked again on the participant's lookup policy.
    LOOKUP_UNAVAILABLE = "lookup-unavailable"
    # The lookup answered that it cannot tell (yet): still UNKNOWN, asked again on the same
    # policy, and when that is spent the effect goes to a person.
    LOOKUP_CANNOT_TELL = "lookup-cannot-tell"
    # Operator repairs only. A FAILED effect was proven not applied, so one more attempt under
    # the same key cannot apply it twice; a FAILED compensation a person settled by other means
    # is SATISFIED with their evidence.
    OPERATOR_RETRY = "operator-retry"
    OPERATOR_SATISFY = "operator-satisfy"


_S = EffectState
_E = EffectEvent

EFFECT_MACHINE: Machine[EffectState, EffectEvent] = Machine(
    name="effect",
    table={
        (_S.NEW, _E.INTEND): _S.INTENDED,
        (_S.NEW, _E.PLAN): _S.PLANNED,
        (_S.PLANNED, _E.INTEND): _S.INTENDED,
        (_S.PLANNED, _E.SATISFY): _S.SATISFIED,
        (_S.INTENDED, _E.CONFIRM): _S.CONFIRMED,
        (_S.INTENDED, _E.REJECT_FINAL): _S.FAILED,
        (_S.INTENDED, _E.LOSE_OUTCOME): _S.UNKNOWN,
        (_S.INTENDED, _E.REDISPATCH): _S.INTENDED,
        (_S.INTENDED, _E.ACCEPT): _S.ACCEPTED,
        (_S.ACCEPTED, _E.CONFIRM): _S.CONFIRMED,
        (_S.ACCEPTED, _E.REJECT_FINAL): _S.FAILED,
        (_S.ACCEPTED, _E.LOSE_OUTCOME): _S.UNKNOWN,
        (_S.UNKNOWN, _E.CONFIRM): _S.CONFIRMED,
        (_S.UNKNOWN, _E.REJECT_FINAL): _S.FAILED,
        (_S.UNKNOWN, _E.REDISPATCH): _S.INTENDED,
        (_S.UNKNOWN, _E.LOOKUP_UNAVAILABLE): _S.UNKNOWN,
        (_S.UNKNOWN, _E.LOOKUP_CANNOT_TELL): _S.UNKNOWN,
        (_S.FAILED, _E.OPERATOR_RETRY): _S.INTENDED,
        (_S.FAILED, _E.OPERATOR_SATISFY): _S.SATISFIED,
    },
    terminal=frozenset({_S.CONFIRMED, _S.FAILED, _S.SATISFIED}),
    operator_only=frozenset({_E.OPERATOR_RETRY, _E.OPERATOR_SATISFY}),
)


class LookupVerdict(enum.Enum):
    APPLIED = "applied"
    NOT_APPLIED = "not-applied"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupAnswer:
    """A participant's answer about one idempotency key.

    The contract a participant signs by offering a lookup: NOT_APPLIED means the key was not
    applied *and will not be* by any dispatch with an attempt number up to the one asked about
    (the lookup fences those attempts). Without that promise a late original request could
    apply after the engine re-dispatched under a higher attempt number.
    """

    verdict: LookupVerdict
    """Applied, not applied, or unknown."""
    evidence: Any = None
    """With an applied verdict: the participant's receipt, recorded as the effect's evidence."""
    reason: str | None = None
    """With an unknown verdict: why the participant cannot tell (carried into the park)."""

    @classmethod
    def applied(cls, evidence: Any) -> LookupAnswer:
        """The key was applied; ``evidence`` (the participant's receipt) confirms the effect."""
        return cls(verdict=LookupVerdict.APPLIED, evidence=evidence)

    @classmethod
    def not_applied(cls) -> LookupAnswer:
        """The key was not applied and never will be by an attempt up to the one asked about (the
        participant fences them)."""
        return cls(verdict=LookupVerdict.NOT_APPLIED)

    @classmethod
    def unknown(cls, reason: str | None = None) -> LookupAnswer:
        """The participant cannot tell (yet), for ``reason``: the engine asks again on the
        participant's ``lookup_retry``, and when that is spent hands the effect to a person,
        even at a participant that deduplicates (it may have forgotten the key)."""
        return cls(verdict=LookupVerdict.UNKNOWN, reason=reason)


class ResolutionKind(enum.Enum):
    CONFIRM = "confirm"
    REDISPATCH = "redispatch"
    FAIL = "fail"
    PARK = "park"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    kind: ResolutionKind
    reason: str
    evidence: Any = None


def resolve_unknown(
    *,
    answer: LookupAnswer | None,
    deduplicates: bool,
    attempts_left: int,
    doubt_goes_to_operator: bool = False,
    lookup_unreachable: bool = False,
) -> Resolution:
    """Decide what to do about an UNKNOWN effect. ``answer`` is the lookup's last answer once
    its ``lookup_retry`` is spent, or None when there is none (no lookup, or one that could not
    be asked at all: ``lookup_unreachable``, which only changes the words).

    The order matters: evidence from the participant beats everything; a participant's own word
    that it cannot tell beats its declared deduplication (it may have forgotten the key, and
    the same key again would then apply twice); a deduplicating participant may otherwise
    safely receive the same key again; anything else goes to a person. An effect classified
    manual-intervention (``doubt_goes_to_operator``) accepts only the participant's evidence:
    every other doubt goes to a person.
    """
    verdict = answer.verdict if answer is not None else None
    if answer is not None and verdict is LookupVerdict.APPLIED:
        return Resolution(
            kind=ResolutionKind.CONFIRM, reason="lookup: applied", evidence=answer.evidence
        )
    if verdict is LookupVerdict.NOT_APPLIED:
        if attempts_left > 0:
            return Resolution(kind=ResolutionKind.REDISPATCH, reason="lookup: not applied")
        return Resolution(kind=ResolutionKind.FAIL, reason="lookup: not applied, no attempt left")
    if answer is not None:
        why = f": {answer.reason}" if answer.reason else ""
        return Resolution(
            kind=ResolutionKind.PARK, reason=f"outcome unknown: lookup cannot tell{why}"
        )
    if doubt_goes_to_operator:
        return Resolution(
            kind=ResolutionKind.PARK,
            reason="outcome unknown and the effect is classified manual-intervention",
        )
    if deduplicates:
        if attempts_left > 0:
            return Resolution(
                kind=ResolutionKind.REDISPATCH, reason="participant deduplicates: same key again"
            )
        return Resolution(
            kind=ResolutionKind.PARK,
            reason="outcome unknown and the attempt limit is reached",
        )
    if lookup_unreachable:
        why = (
            "outcome unknown: its lookup could not be asked and the participant does not "
            "deduplicate"
        )
    else:
        why = "outcome unknown: the participant has no lookup and does not deduplicate"
    return Resolution(kind=ResolutionKind.PARK, reason=why)
