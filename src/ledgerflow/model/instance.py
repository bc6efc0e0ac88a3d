"""The workflow instance: its states, the events that move it, and the failure verdict.

docs/design.md fixes the states. FAILED is allowed only when no effect was ever committed, so the
choice of terminal state after a workflow error is a pure function of what the ledger holds
(:func:`failure_event`), never of what the workflow code would like.
"""

from __future__ import annotations

import enum

from ledgerflow.model.machine import Machine


class InstanceStatus(enum.Enum):
    # A delayed start (``start_at=`` / ``start_in=``): the instance exists, can be read,
    # signalled (its events are kept for when it runs) and cancelled, and runs no step before
    # its time (``available_at``).
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    COMPENSATING = "COMPENSATING"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    COMPENSATED = "COMPENSATED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    FORWARD_RECOVERY_REQUIRED = "FORWARD_RECOVERY_REQUIRED"
    MANUAL_INTERVENTION = "MANUAL_INTERVENTION"


TERMINAL_STATUSES = frozenset(
    {
        InstanceStatus.SUCCEEDED,
        InstanceStatus.COMPENSATED,
        InstanceStatus.FAILED,
        InstanceStatus.CANCELLED,
        InstanceStatus.FORWARD_RECOVERY_REQUIRED,
        InstanceStatus.MANUAL_INTERVENTION,
    }
)

# Terminal statuses nothing brings back (no repair resumes them): reaching one settles the
# instance's open requests and events. MANUAL_INTERVENTION and FORWARD_RECOVERY_REQUIRED stop
# for a person, who may resume the instance: what is pending stays pending there.
FINAL_STATUSES = frozenset(
    {
        InstanceStatus.SUCCEEDED,
        InstanceStatus.COMPENSATED,
        InstanceStatus.FAILED,
        InstanceStatus.CANCELLED,
    }
)

# Statuses a worker may claim and drive; the others wait for time, an event or an operator.
RUNNABLE_STATUSES = frozenset(
    {InstanceStatus.RUNNING, InstanceStatus.COMPENSATING, InstanceStatus.CANCELLING}
)


class InstanceEvent(enum.Enum):
    # A scheduled instance's time has come: its first run begins.
    START = "start"
    SUSPEND = "suspend"
    WAKE = "wake"
    COMPLETE = "complete"
    FAIL_CLEAN = "fail-clean"
    FAIL_AFTER_EFFECTS = "fail-after-effects"
    FAIL_AFTER_PIVOT = "fail-after-pivot"
    COMPENSATIONS_DONE = "compensations-done"
    CANCEL = "cancel"
    CANCELLATION_DONE = "cancellation-done"
    PARK = "park"
    OPERATOR_RESUME = "operator-resume"
    # Operator repairs (audited, see docs/operators.md): resume a parked instance where it was
    # parked from, and the two endings a person may state once the ledger proves them.
    OPERATOR_RESUME_COMPENSATION = "operator-resume-compensation"
    OPERATOR_RESUME_CANCELLATION = "operator-resume-cancellation"
    OPERATOR_FAIL = "operator-fail"
    OPERATOR_COMPENSATED = "operator-compensated"


_S = InstanceStatus
_E = InstanceEvent

INSTANCE_MACHINE: Machine[InstanceStatus, InstanceEvent] = Machine(
    name="instance",
    table={
        (_S.SCHEDULED, _E.START): _S.RUNNING,
        # Cancelled before its time: nothing ran, nothing is undone, it ends CANCELLED.
        (_S.SCHEDULED, _E.CANCEL): _S.CANCELLING,
        (_S.RUNNING, _E.SUSPEND): _S.WAITING,
        (_S.RUNNING, _E.COMPLETE): _S.SUCCEEDED,
        (_S.RUNNING, _E.FAIL_CLEAN): _S.FAILED,
        (_S.RUNNING, _E.FAIL_AFTER_EFFECTS): _S.COMPENSATING,
        (_S.RUNNING, _E.FAIL_AFTER_PIVOT): _S.FORWARD_RECOVERY_REQUIRED,
        (_S.RUNNING, _E.CANCEL): _S.CANCELLING,
        (_S.RUNNING, _E.PARK): _S.MANUAL_INTERVENTION,
        (_S.WAITING, _E.WAKE): _S.RUNNING,
        (_S.WAITING, _E.CANCEL): _S.CANCELLING,
        (_S.WAITING, _E.PARK): _S.MANUAL_INTERVENTION,
        (_S.COMPENSATING, _E.COMPENSATIONS_DONE): _S.COMPENSATED,
        (_S.COMPENSATING, _E.PARK): _S.MANUAL_INTERVENTION,
        (_S.CANCELLING, _E.CANCELLATION_DONE): _S.CANCELLED,
        (_S.CANCELLING, _E.PARK): _S.MANUAL_INTERVENTION,
        # Only an operator brings a parked or forward-only instance back to life.
        (_S.MANUAL_INTERVENTION, _E.OPERATOR_RESUME): _S.RUNNING,
        (_S.FORWARD_RECOVERY_REQUIRED, _E.OPERATOR_RESUME): _S.RUNNING,
        # Parked while compensating or cancelling: resuming continues that, never the workflow.
        (_S.MANUAL_INTERVENTION, _E.OPERATOR_RESUME_COMPENSATION): _S.COMPENSATING,
        (_S.MANUAL_INTERVENTION, _E.OPERATOR_RESUME_CANCELLATION): _S.CANCELLING,
        # A person may end a parked instance only where the ledger backs it: FAILED when no
        # effect is confirmed or in doubt (the store refuses it otherwise too), COMPENSATED
        # when every planned compensation is done (model/repair.py checks both).
        (_S.MANUAL_INTERVENTION, _E.OPERATOR_FAIL): _S.FAILED,
        (_S.MANUAL_INTERVENTION, _E.OPERATOR_COMPENSATED): _S.COMPENSATED,
    },
    terminal=TERMINAL_STATUSES,
    operator_only=frozenset(
        {
            _E.OPERATOR_RESUME_COMPENSATION,
            _E.OPERATOR_RESUME_CANCELLATION,
            _E.OPERATOR_FAIL,
            _E.OPERATOR_COMPENSATED,
        }
    ),
)


def failure_event(*, effects_confirmed: int, pivot_confirmed: bool) -> InstanceEvent:
    """Which event a workflow error causes, given what the effect ledger holds.

    FAILED would claim that nothing happened anywhere, so it is chosen only when no effect was
    confirmed. After a pivot nothing may be compensated across it. Effects in doubt (UNKNOWN)
    never reach this function: they are resolved or parked first.
    """
    if pivot_confirmed:
        return InstanceEvent.FAIL_AFTER_PIVOT
    if effects_confirmed > 0:
        return InstanceEvent.FAIL_AFTER_EFFECTS
    return InstanceEvent.FAIL_CLEAN
