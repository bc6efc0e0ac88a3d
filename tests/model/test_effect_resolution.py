"""How an UNKNOWN effect is resolved: by evidence, by a safe same-key re-dispatch, or by a person.

:func:`resolve_unknown` is the whole decision. The full matrix of its inputs (no lookup or a
lookup answering applied / not applied / unknown, a participant that deduplicates or not, an
attempt left or not, an effect classified manual-intervention or not) is written out below
from docs/design.md step 4 of the effect protocol, and a property checks the safety rule over
any number of attempts: a participant that does not deduplicate is never sent the key again
unless its lookup proved the key was not applied, and one whose lookup cannot tell never is.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerflow.model.effect import (
    EFFECT_MACHINE,
    EffectEvent,
    EffectState,
    LookupAnswer,
    LookupVerdict,
    ResolutionKind,
    resolve_unknown,
)

EVIDENCE = {"receipt": "r-1"}
ANSWERS: dict[str, LookupAnswer | None] = {
    "no-lookup": None,
    "applied": LookupAnswer.applied(EVIDENCE),
    "not-applied": LookupAnswer.not_applied(),
    "unknown": LookupAnswer.unknown(),
}
K = ResolutionKind

# (answer, deduplicates, attempts_left, manual) -> kind, ``manual`` an effect classified
# manual-intervention. Evidence beats everything; "not applied" is a promise that makes a
# same-key re-dispatch safe while attempts are left; a lookup that still cannot tell (its
# lookup_retry spent) goes to an operator even at a deduplicating participant, which may have
# forgotten the key; with no answer at all only a deduplicating participant may receive the key
# again, and not for a manual-intervention effect; anything else goes to an operator.
MATRIX: dict[tuple[str, bool, int, bool], ResolutionKind] = {
    ("no-lookup", False, 0, False): K.PARK,
    ("no-lookup", False, 1, False): K.PARK,
    ("no-lookup", True, 0, False): K.PARK,
    ("no-lookup", True, 1, False): K.REDISPATCH,
    ("no-lookup", False, 0, True): K.PARK,
    ("no-lookup", False, 1, True): K.PARK,
    ("no-lookup", True, 0, True): K.PARK,
    ("no-lookup", True, 1, True): K.PARK,
    ("applied", False, 0, False): K.CONFIRM,
    ("applied", False, 1, False): K.CONFIRM,
    ("applied", True, 0, False): K.CONFIRM,
    ("applied", True, 1, False): K.CONFIRM,
    ("applied", False, 0, True): K.CONFIRM,
    ("applied", False, 1, True): K.CONFIRM,
    ("applied", True, 0, True): K.CONFIRM,
    ("applied", True, 1, True): K.CONFIRM,
    ("not-applied", False, 0, False): K.FAIL,
    ("not-applied", False, 1, False): K.REDISPATCH,
    ("not-applied", True, 0, False): K.FAIL,
    ("not-applied", True, 1, False): K.REDISPATCH,
    ("not-applied", False, 0, True): K.FAIL,
    ("not-applied", False, 1, True): K.REDISPATCH,
    ("not-applied", True, 0, True): K.FAIL,
    ("not-applied", True, 1, True): K.REDISPATCH,
    ("unknown", False, 0, False): K.PARK,
    ("unknown", False, 1, False): K.PARK,
    ("unknown", True, 0, False): K.PARK,
    ("unknown", True, 1, False): K.PARK,
    ("unknown", False, 0, True): K.PARK,
    ("unknown", False, 1, True): K.PARK,
    ("unknown", True, 0, True): K.PARK,
    ("unknown", True, 1, True): K.PARK,
}


def test_matrix_covers_every_input_combination() -> None:
    """Goal: the table below is the full matrix, so no combination goes untested.

    Method: the keys of MATRIX are the product of answers x deduplicates x attempts_left 0/1 x
    classified manual-intervention or not.
    """
    combinations = {
        (a, d, n, m) for a in ANSWERS for d in (False, True) for n in (0, 1) for m in (False, True)
    }
    assert set(MATRIX) == combinations


@pytest.mark.parametrize(("answer", "deduplicates", "attempts_left", "manual"), sorted(MATRIX))
def test_resolution_matrix(
    answer: str, deduplicates: bool, attempts_left: int, manual: bool
) -> None:
    """Goal: each combination of lookup answer, deduplication, attempts left and
    classification gets the designed resolution.

    Method: call ``resolve_unknown`` and compare its kind with MATRIX; a confirmation carries the
    lookup's evidence, every other resolution carries none, and every resolution has a reason.
    """
    resolution = resolve_unknown(
        answer=ANSWERS[answer],
        deduplicates=deduplicates,
        attempts_left=attempts_left,
        doubt_goes_to_operator=manual,
    )
    assert resolution.kind is MATRIX[(answer, deduplicates, attempts_left, manual)]
    if resolution.kind is K.CONFIRM:
        assert resolution.evidence == EVIDENCE
    else:
        assert resolution.evidence is None
    assert resolution.reason


def test_a_lookup_that_cannot_tell_parks_with_its_reason() -> None:
    """Goal: a deduplicating participant's own word that it cannot vouch for the key beats its
    declared deduplication, and its reason reaches the person who must decide.

    Method: an unknown answer with a reason, at a deduplicating participant with attempts left,
    parks with "lookup cannot tell" and the reason; without a reason the words stand alone.
    """
    told = resolve_unknown(
        answer=LookupAnswer.unknown(reason="key purged"), deduplicates=True, attempts_left=5
    )
    assert (told.kind, told.reason) == (K.PARK, "outcome unknown: lookup cannot tell: key purged")
    bare = resolve_unknown(answer=LookupAnswer.unknown(), deduplicates=True, attempts_left=5)
    assert bare.reason == "outcome unknown: lookup cannot tell"


# Each resolution kind is carried out as one effect transition out of UNKNOWN (or none: PARK
# leaves the effect UNKNOWN for an operator).
RESOLUTION_EVENT = {
    K.CONFIRM: EffectEvent.CONFIRM,
    K.REDISPATCH: EffectEvent.REDISPATCH,
    K.FAIL: EffectEvent.REJECT_FINAL,
}


def test_every_resolution_is_an_allowed_transition_out_of_unknown() -> None:
    """Goal: whatever the decision, the effect machine can record it.

    Method: map each non-PARK resolution kind to its effect event and check the edge out of
    UNKNOWN exists and leads where the kind says (CONFIRMED, INTENDED for a new attempt, FAILED).
    """
    assert set(RESOLUTION_EVENT) | {K.PARK} == set(ResolutionKind)
    targets = {K.CONFIRM: EffectState.CONFIRMED, K.REDISPATCH: EffectState.INTENDED}
    targets[K.FAIL] = EffectState.FAILED
    for kind, event in RESOLUTION_EVENT.items():
        assert EFFECT_MACHINE.check(EffectState.UNKNOWN, event) is targets[kind]


answers = st.sampled_from(list(ANSWERS.values()))


@settings(derandomize=True, database=None)
@given(answer=answers, deduplicates=st.booleans(), attempts_left=st.integers(0, 1_000))
def test_no_redispatch_without_dedupe_unless_proven_not_applied(
    answer: LookupAnswer | None, deduplicates: bool, attempts_left: int
) -> None:
    """Goal: invariant 1 (never applied twice) at the decision level.

    Method: property over every answer, any number of attempts left and both deduplication
    flags: REDISPATCH to a non-deduplicating participant only after a NOT_APPLIED lookup; never
    a REDISPATCH after an UNKNOWN lookup (the participant may have forgotten the key), nor with
    no attempt left; FAIL only on a NOT_APPLIED lookup; CONFIRM only on an APPLIED one.
    """
    resolution = resolve_unknown(
        answer=answer, deduplicates=deduplicates, attempts_left=attempts_left
    )
    verdict = answer.verdict if answer is not None else None
    if resolution.kind is K.REDISPATCH:
        assert attempts_left > 0
        if not deduplicates:
            assert verdict is LookupVerdict.NOT_APPLIED
        assert verdict is not LookupVerdict.UNKNOWN
    if resolution.kind is K.FAIL:
        assert verdict is LookupVerdict.NOT_APPLIED
    assert (resolution.kind is K.CONFIRM) is (verdict is LookupVerdict.APPLIED)


def test_lookup_answer_constructors() -> None:
    """Goal: the three constructors participant code uses build the right answers.

    Method: check verdict and evidence of each, the verdicts' wire values, and that answers are
    immutable values compared by content.
    """
    applied = LookupAnswer.applied({"id": 7})
    assert applied.verdict is LookupVerdict.APPLIED
    assert applied.evidence == {"id": 7}
    assert LookupAnswer.not_applied() == LookupAnswer(verdict=LookupVerdict.NOT_APPLIED)
    assert LookupAnswer.not_applied().evidence is None
    assert LookupAnswer.unknown() == LookupAnswer(verdict=LookupVerdict.UNKNOWN, evidence=None)
    assert LookupAnswer.unknown("purged").reason == "purged"
    assert LookupAnswer.applied("x") != LookupAnswer.applied("y")
    assert [v.value for v in LookupVerdict] == ["applied", "not-applied", "unknown"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        applied.evidence = None  # type: ignore[misc]  # proving the answer is immutable
