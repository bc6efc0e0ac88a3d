"""The instance, step and effect state machines, checked pair by pair against docs/design.md.

The expected tables below are written out by hand from the meaning of each state in docs/design.md,
not read back from the machines, so a change to a machine's table has to be made twice (here
and there) and reviewed as a change of meaning. Every (state, event) pair of each machine's
enums is tried: listed pairs must give exactly the listed target, every other pair must be
refused with an :class:`IllegalTransitionError` that names the machine, the state and the event.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerflow.errors import IllegalTransitionError
from ledgerflow.model.effect import EFFECT_MACHINE, EffectEvent, EffectState
from ledgerflow.model.instance import (
    INSTANCE_MACHINE,
    RUNNABLE_STATUSES,
    TERMINAL_STATUSES,
    InstanceEvent,
    InstanceStatus,
    failure_event,
)
from ledgerflow.model.machine import Machine
from ledgerflow.model.step import STEP_MACHINE, StepEvent, StepStatus

# Short aliases keep the tables below at one edge per line.
Inst = InstanceStatus
InstEv = InstanceEvent
Step = StepStatus
StepEv = StepEvent
Eff = EffectState
EffEv = EffectEvent

# -- the expected tables, from docs/design.md ------------------------------------------------------

# "Instance states": RUNNING may wait, succeed, fail (cleanly, after effects, after a pivot),
# be cancelled or parked. WAITING holds nothing and may only wake, be cancelled or be parked.
# COMPENSATING and CANCELLING each have one way to finish and may always give up to an
# operator. Only an operator brings MANUAL_INTERVENTION or FORWARD_RECOVERY_REQUIRED back.
EXPECTED_INSTANCE: dict[tuple[InstanceStatus, InstanceEvent], InstanceStatus] = {
    (Inst.SCHEDULED, InstEv.START): Inst.RUNNING,
    (Inst.SCHEDULED, InstEv.CANCEL): Inst.CANCELLING,
    (Inst.RUNNING, InstEv.SUSPEND): Inst.WAITING,
    (Inst.RUNNING, InstEv.COMPLETE): Inst.SUCCEEDED,
    (Inst.RUNNING, InstEv.FAIL_CLEAN): Inst.FAILED,
    (Inst.RUNNING, InstEv.FAIL_AFTER_EFFECTS): Inst.COMPENSATING,
    (Inst.RUNNING, InstEv.FAIL_AFTER_PIVOT): Inst.FORWARD_RECOVERY_REQUIRED,
    (Inst.RUNNING, InstEv.CANCEL): Inst.CANCELLING,
    (Inst.RUNNING, InstEv.PARK): Inst.MANUAL_INTERVENTION,
    (Inst.WAITING, InstEv.WAKE): Inst.RUNNING,
    (Inst.WAITING, InstEv.CANCEL): Inst.CANCELLING,
    (Inst.WAITING, InstEv.PARK): Inst.MANUAL_INTERVENTION,
    (Inst.COMPENSATING, InstEv.COMPENSATIONS_DONE): Inst.COMPENSATED,
    (Inst.COMPENSATING, InstEv.PARK): Inst.MANUAL_INTERVENTION,
    (Inst.CANCELLING, InstEv.CANCELLATION_DONE): Inst.CANCELLED,
    (Inst.CANCELLING, InstEv.PARK): Inst.MANUAL_INTERVENTION,
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_RESUME): Inst.RUNNING,
    (Inst.FORWARD_RECOVERY_REQUIRED, InstEv.OPERATOR_RESUME): Inst.RUNNING,
    # Audited repairs (docs/operators.md): resume where it was parked from; end it only where
    # the ledger backs the ending (checked by the repair planner and, for FAILED, the store).
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_RESUME_COMPENSATION): Inst.COMPENSATING,
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_RESUME_CANCELLATION): Inst.CANCELLING,
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_FAIL): Inst.FAILED,
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_COMPENSATED): Inst.COMPENSATED,
}
EXPECTED_INSTANCE_TERMINAL = {
    Inst.SUCCEEDED,
    Inst.COMPENSATED,
    Inst.FAILED,
    Inst.CANCELLED,
    Inst.FORWARD_RECOVERY_REQUIRED,
    Inst.MANUAL_INTERVENTION,
}
# The documented operator edges: the only edges out of a terminal instance state.
OPERATOR_EDGES = {
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_RESUME),
    (Inst.FORWARD_RECOVERY_REQUIRED, InstEv.OPERATOR_RESUME),
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_RESUME_COMPENSATION),
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_RESUME_CANCELLATION),
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_FAIL),
    (Inst.MANUAL_INTERVENTION, InstEv.OPERATOR_COMPENSATED),
}
# The operator edges out of FAILED steps and effects: a retry under the original identity, a
# recorded substitute (steps) or a person's evidence that a compensation is settled (effects).
STEP_OPERATOR_EDGES = {(Step.FAILED, StepEv.OPERATOR_RETRY), (Step.FAILED, StepEv.OPERATOR_SKIP)}
EFFECT_OPERATOR_EDGES = {(Eff.FAILED, EffEv.OPERATOR_RETRY), (Eff.FAILED, EffEv.OPERATOR_SATISFY)}

# A step (NEW = no row yet) is started, completed, scheduled for a retry or failed; a local step
# that succeeds or fails at its first try is journaled once, directly in its outcome. A started
# step may be deferred (it stays STARTED with a new due time: a callback's deadline, a lookup's
# backoff). COMPLETED is final; FAILED is left only by an audited operator repair (one more
# attempt, or a recorded substitute result).
EXPECTED_STEP: dict[tuple[StepStatus, StepEvent], StepStatus] = {
    (Step.NEW, StepEv.START): Step.STARTED,
    (Step.NEW, StepEv.COMPLETE): Step.COMPLETED,
    (Step.NEW, StepEv.SCHEDULE_RETRY): Step.RETRY_SCHEDULED,
    (Step.NEW, StepEv.FAIL): Step.FAILED,
    (Step.STARTED, StepEv.DEFER): Step.STARTED,
    (Step.STARTED, StepEv.COMPLETE): Step.COMPLETED,
    (Step.STARTED, StepEv.SCHEDULE_RETRY): Step.RETRY_SCHEDULED,
    (Step.STARTED, StepEv.FAIL): Step.FAILED,
    (Step.RETRY_SCHEDULED, StepEv.START): Step.STARTED,
    (Step.RETRY_SCHEDULED, StepEv.COMPLETE): Step.COMPLETED,
    (Step.RETRY_SCHEDULED, StepEv.SCHEDULE_RETRY): Step.RETRY_SCHEDULED,
    (Step.RETRY_SCHEDULED, StepEv.FAIL): Step.FAILED,
    (Step.FAILED, StepEv.OPERATOR_RETRY): Step.RETRY_SCHEDULED,
    (Step.FAILED, StepEv.OPERATOR_SKIP): Step.COMPLETED,
}
EXPECTED_STEP_TERMINAL = {Step.COMPLETED, Step.FAILED}

# "The effect protocol": the intent is written first (NEW -> INTENDED); its outcome is
# CONFIRMED, FAILED (proven not applied) or UNKNOWN. UNKNOWN is left only by evidence (confirm,
# reject-final) or by a re-dispatch under the same key; it stays UNKNOWN when its lookup could
# not be asked (lookup-unavailable: no answer, asked again later) or answered that it cannot
# tell (lookup-cannot-tell: asked again, then a person), never by a new dispatch, and
# nothing leaves CONFIRMED (an effect is never applied twice). FAILED (proven not applied) is
# left only by an audited operator repair: one more attempt under the same key, or a person's
# evidence that a failed compensation is settled (SATISFIED). A
# compensation is PLANNED when the instance starts compensating; from there it is intended, or
# SATISFIED (its precondition shows the participant's state already reflects it: not applied).
EXPECTED_EFFECT: dict[tuple[EffectState, EffectEvent], EffectState] = {
    (Eff.NEW, EffEv.INTEND): Eff.INTENDED,
    (Eff.NEW, EffEv.PLAN): Eff.PLANNED,
    (Eff.PLANNED, EffEv.INTEND): Eff.INTENDED,
    (Eff.PLANNED, EffEv.SATISFY): Eff.SATISFIED,
    (Eff.INTENDED, EffEv.ACCEPT): Eff.ACCEPTED,
    (Eff.ACCEPTED, EffEv.CONFIRM): Eff.CONFIRMED,
    (Eff.ACCEPTED, EffEv.REJECT_FINAL): Eff.FAILED,
    (Eff.ACCEPTED, EffEv.LOSE_OUTCOME): Eff.UNKNOWN,
    (Eff.INTENDED, EffEv.CONFIRM): Eff.CONFIRMED,
    (Eff.INTENDED, EffEv.REJECT_FINAL): Eff.FAILED,
    (Eff.INTENDED, EffEv.LOSE_OUTCOME): Eff.UNKNOWN,
    (Eff.INTENDED, EffEv.REDISPATCH): Eff.INTENDED,
    (Eff.UNKNOWN, EffEv.CONFIRM): Eff.CONFIRMED,
    (Eff.UNKNOWN, EffEv.REJECT_FINAL): Eff.FAILED,
    (Eff.UNKNOWN, EffEv.REDISPATCH): Eff.INTENDED,
    (Eff.UNKNOWN, EffEv.LOOKUP_UNAVAILABLE): Eff.UNKNOWN,
    (Eff.UNKNOWN, EffEv.LOOKUP_CANNOT_TELL): Eff.UNKNOWN,
    (Eff.FAILED, EffEv.OPERATOR_RETRY): Eff.INTENDED,
    (Eff.FAILED, EffEv.OPERATOR_SATISFY): Eff.SATISFIED,
}
EXPECTED_EFFECT_TERMINAL = {Eff.CONFIRMED, Eff.FAILED, Eff.SATISFIED}

CASES: list[tuple[str, Machine[Any, Any], Mapping[tuple[Any, Any], Any], type[enum.Enum]]] = [
    ("instance", INSTANCE_MACHINE, EXPECTED_INSTANCE, InstanceStatus),
    ("step", STEP_MACHINE, EXPECTED_STEP, StepStatus),
    ("effect", EFFECT_MACHINE, EXPECTED_EFFECT, EffectState),
]


def _every_pair(
    machine: Machine[Any, Any],
    expected: Mapping[tuple[Any, Any], Any],
    states: type[enum.Enum],
    events: type[enum.Enum],
) -> list[Any]:
    return [
        pytest.param(
            machine, state, event, expected.get((state, event)), id=f"{state.name}-{event.name}"
        )
        for state, event in itertools.product(states, events)
    ]


PAIRS = (
    _every_pair(INSTANCE_MACHINE, EXPECTED_INSTANCE, InstanceStatus, InstanceEvent)
    + _every_pair(STEP_MACHINE, EXPECTED_STEP, StepStatus, StepEvent)
    + _every_pair(EFFECT_MACHINE, EXPECTED_EFFECT, EffectState, EffectEvent)
)


@pytest.mark.parametrize(("machine", "state", "event", "target"), PAIRS)
def test_every_pair_is_allowed_exactly_as_designed(
    machine: Machine[Any, Any], state: enum.Enum, event: enum.Enum, target: enum.Enum | None
) -> None:
    """Goal: each machine allows exactly the designed transitions and nothing else.

    Method: for one (state, event) pair of the machine's enums, ``check`` must return the
    expected target when the pair is designed, and otherwise raise IllegalTransitionError whose
    ``machine``, ``state`` and ``event`` attributes name the refused pair; ``allows`` agrees.
    """
    if target is not None:
        assert machine.check(state, event) is target
        assert machine.allows(state, event)
        return
    assert not machine.allows(state, event)
    with pytest.raises(IllegalTransitionError) as refused:
        machine.check(state, event)
    error = refused.value
    assert error.code == "LF310"
    assert error.machine == machine.name
    assert error.state == state.value
    assert error.event == event.value


@pytest.mark.parametrize(
    ("name", "machine", "expected", "terminal"),
    [
        ("instance", INSTANCE_MACHINE, EXPECTED_INSTANCE, EXPECTED_INSTANCE_TERMINAL),
        ("step", STEP_MACHINE, EXPECTED_STEP, EXPECTED_STEP_TERMINAL),
        ("effect", EFFECT_MACHINE, EXPECTED_EFFECT, EXPECTED_EFFECT_TERMINAL),
    ],
)
def test_machine_name_table_and_terminal_set(
    name: str,
    machine: Machine[Any, Any],
    expected: Mapping[tuple[Any, Any], Any],
    terminal: set[Any],
) -> None:
    """Goal: the machine's name, whole table and terminal set are the designed ones.

    Method: compare ``name``, ``edges()`` (as a dict) and ``terminal`` with the hand-written
    expectations; ``is_terminal`` must agree with the terminal set for every state.
    """
    assert machine.name == name
    assert {(s, e): t for s, e, t in machine.edges()} == dict(expected)
    assert set(machine.terminal) == terminal
    state_type = type(next(iter(terminal)))
    for state in state_type:
        assert machine.is_terminal(state) is (state in terminal)


def test_instance_terminal_statuses_are_the_designed_six() -> None:
    """Goal: the module-level status sets match docs/design.md.

    Method: TERMINAL_STATUSES is the six terminal states; RUNNABLE_STATUSES (what a worker may
    claim) are the non-terminal states that hold work, i.e. everything but WAITING.
    """
    assert set(TERMINAL_STATUSES) == EXPECTED_INSTANCE_TERMINAL
    assert set(RUNNABLE_STATUSES) == {Inst.RUNNING, Inst.COMPENSATING, Inst.CANCELLING}
    assert not RUNNABLE_STATUSES & TERMINAL_STATUSES


@pytest.mark.parametrize(("name", "machine", "expected", "states"), CASES)
def test_terminal_states_have_no_edges_but_the_operator_ones(
    name: str,
    machine: Machine[Any, Any],
    expected: Mapping[tuple[Any, Any], Any],
    states: type[enum.Enum],
) -> None:
    """Goal: nothing moves a terminal state except the documented operator edges.

    Method: collect every allowed edge whose source is terminal; for the instance machine it
    must be exactly the documented operator edges (for steps and effects: the FAILED ones).
    """
    out_of_terminal = {(s, e) for s, e, _ in machine.edges() if machine.is_terminal(s)}
    documented = {
        "instance": OPERATOR_EDGES,
        "step": STEP_OPERATOR_EDGES,
        "effect": EFFECT_OPERATOR_EDGES,
    }
    assert out_of_terminal == documented[name]


@pytest.mark.parametrize(("name", "machine", "expected", "states"), CASES)
def test_every_non_terminal_state_can_reach_a_terminal_one(
    name: str,
    machine: Machine[Any, Any],
    expected: Mapping[tuple[Any, Any], Any],
    states: type[enum.Enum],
) -> None:
    """Goal: no state is a dead end (invariant 6: everything ends terminal or visibly parked).

    Method: breadth-first search over ``targets`` from every non-terminal state must reach at
    least one terminal state.
    """
    for start in states:
        if machine.is_terminal(start):
            continue
        seen, frontier = {start}, [start]
        while frontier:
            frontier = [t for s in frontier for t in machine.targets(s) if t not in seen]
            seen.update(frontier)
        assert seen & set(machine.terminal), f"{name}: {start.name} cannot reach a terminal state"


def test_every_terminal_instance_status_is_reachable_from_running() -> None:
    """Goal: each of the six designed endings can actually happen.

    Method: search the instance machine's edges from RUNNING (where every instance starts) and
    require all terminal statuses in the reachable set.
    """
    seen, frontier = {Inst.RUNNING}, [Inst.RUNNING]
    while frontier:
        frontier = [t for s in frontier for t in INSTANCE_MACHINE.targets(s) if t not in seen]
        seen.update(frontier)
    assert seen >= EXPECTED_INSTANCE_TERMINAL


def test_nothing_returns_to_new() -> None:
    """Goal: NEW (the absence of a row) is only ever a source, never a target.

    Method: no edge of the step or effect machine ends in NEW.
    """
    assert all(t is not Step.NEW for _, _, t in STEP_MACHINE.edges())
    assert all(t is not Eff.NEW for _, _, t in EFFECT_MACHINE.edges())


def test_check_write_and_event_to_follow_the_table() -> None:
    """Goal: the write-level check the store makes, and the event a forced ending uses, agree
    with the event-level table.

    Method: for every (state, event, target) triple of every machine, ``check_write`` (for an
    operator, who may use every event) passes exactly when the table takes the state by the
    event to that target, and otherwise raises IllegalTransitionError naming the machine, the
    state and the refused event; ``event_to`` names the one event between two states where
    there is exactly one, and is refused otherwise; ``targets`` lists the reachable states.
    """
    for _, machine, expected, states in CASES:
        events = type(next(iter(expected))[1])
        for state, event, target in itertools.product(states, events, states):
            if expected.get((state, event)) is target:
                machine.check_write(state, event, target, by_operator=True)
                continue
            with pytest.raises(IllegalTransitionError) as refused:
                machine.check_write(state, event, target, by_operator=True)
            assert refused.value.machine == machine.name
            assert refused.value.state == state.value
            assert refused.value.event == event.value
        for state, target in itertools.product(states, states):
            between = [e for (s, e), t in expected.items() if s is state and t is target]
            assert (target in machine.targets(state)) is bool(between)
            if len(between) == 1:
                assert machine.event_to(state, target) is between[0]
            else:
                with pytest.raises(IllegalTransitionError):
                    machine.event_to(state, target)


# -- the failure verdict ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("effects_confirmed", "pivot_confirmed", "event", "status"),
    [
        (0, False, InstEv.FAIL_CLEAN, Inst.FAILED),
        (1, False, InstEv.FAIL_AFTER_EFFECTS, Inst.COMPENSATING),
        (7, False, InstEv.FAIL_AFTER_EFFECTS, Inst.COMPENSATING),
        (1, True, InstEv.FAIL_AFTER_PIVOT, Inst.FORWARD_RECOVERY_REQUIRED),
        (3, True, InstEv.FAIL_AFTER_PIVOT, Inst.FORWARD_RECOVERY_REQUIRED),
        # Inconsistent counts still cannot produce FAILED: the pivot wins.
        (0, True, InstEv.FAIL_AFTER_PIVOT, Inst.FORWARD_RECOVERY_REQUIRED),
    ],
)
def test_failure_event_table(
    effects_confirmed: int, pivot_confirmed: bool, event: InstanceEvent, status: InstanceStatus
) -> None:
    """Goal: a workflow error leads to FAILED only when nothing was committed; a pivot wins.

    Method: call ``failure_event`` for representative ledgers and follow the event from RUNNING.
    """
    chosen = failure_event(effects_confirmed=effects_confirmed, pivot_confirmed=pivot_confirmed)
    assert chosen is event
    assert INSTANCE_MACHINE.check(Inst.RUNNING, chosen) is status


@settings(derandomize=True, database=None)
@given(effects_confirmed=st.integers(min_value=0, max_value=10_000), pivot=st.booleans())
def test_failed_only_when_no_effect_was_confirmed(effects_confirmed: int, pivot: bool) -> None:
    """Goal: the FAILED-only-if-nothing-committed rule holds for any ledger.

    Method: property over confirmed-effect counts and the pivot flag: the status reached from
    RUNNING is FAILED iff no effect was confirmed and no pivot; FORWARD_RECOVERY_REQUIRED iff a
    pivot was confirmed.
    """
    status = INSTANCE_MACHINE.check(
        Inst.RUNNING, failure_event(effects_confirmed=effects_confirmed, pivot_confirmed=pivot)
    )
    assert (status is Inst.FAILED) is (effects_confirmed == 0 and not pivot)
    assert (status is Inst.FORWARD_RECOVERY_REQUIRED) is pivot


@pytest.mark.parametrize(("name", "machine", "expected", "states"), CASES)
def test_operator_edges_are_refused_to_a_workers_write(
    name: str,
    machine: Machine[Any, Any],
    expected: Mapping[tuple[Any, Any], Any],
    states: type[enum.Enum],
) -> None:
    """Goal: the edges added for audited repairs cannot be taken by a worker's commit.

    Method: for every operator-only event, ``check_write`` refuses it unless ``by_operator``,
    even where the same move is a worker's edge under another event: the event is checked.
    """
    for state, event, target in machine.edges():
        if event not in machine.operator_only:
            continue
        machine.check_write(state, event, target, by_operator=True)
        with pytest.raises(IllegalTransitionError):
            machine.check_write(state, event, target)
