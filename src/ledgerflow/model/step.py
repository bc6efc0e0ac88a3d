"""A step: one numbered position in an instance's journal.

A step is either a local computation (its result journaled, its attempts at least once) or an
effect at a participant (driven through the effect protocol, see :mod:`ledgerflow.model.effect`).
"""

from __future__ import annotations

import enum

from ledgerflow.model.machine import Machine


class StepKind(enum.Enum):
    LOCAL = "local"
    EFFECT = "effect"
    # Undoes a confirmed effect; journaled at the negative of the original step's position.
    COMPENSATION = "compensation"
    # A durable sleep, and a wait for an event (signal, callback, approval) with a timeout.
    TIMER = "timer"
    WAIT = "wait"
    # A patch marker (``ctx.patched``): journaled complete, it records that the run took the
    # patched branch at this position.
    MARKER = "marker"
    # A child workflow started at this position (STARTED with the child's id in its input)
    # and, once the parent took the child's ending, COMPLETED with that outcome.
    CHILD = "child"
    # A send to another instance (``ctx.signal_instance``, ``ctx.start_workflow``): journaled
    # complete in the same transaction as the event it delivers or the instance it starts.
    SEND = "send"
    # A durable lock (``ctx.lock``): its acquiring is a wait for the grant (COMPLETED once
    # granted, FAILED at its timeout), its release a position journaled complete.
    LOCK = "lock"


class StepStatus(enum.Enum):
    # There is no row before a step's first write; NEW stands for that absence in the table.
    NEW = "NEW"
    STARTED = "STARTED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class StepEvent(enum.Enum):
    START = "start"
    # The step stays started with a new due time: the deadline of a participant's callback,
    # or when a lookup that could not be asked is asked again.
    DEFER = "defer"
    COMPLETE = "complete"
    SCHEDULE_RETRY = "schedule-retry"
    FAIL = "fail"
    # Operator repairs only: one more attempt of a failed step under its original command id,
    # or a failed step completed with a substitute result a person recorded.
    OPERATOR_RETRY = "operator-retry"
    OPERATOR_SKIP = "operator-skip"


_S = StepStatus
_E = StepEvent

STEP_MACHINE: Machine[StepStatus, StepEvent] = Machine(
    name="step",
    table={
        (_S.NEW, _E.START): _S.STARTED,
        # A local step that succeeds at its first try is journaled once, already complete.
        (_S.NEW, _E.COMPLETE): _S.COMPLETED,
        (_S.NEW, _E.SCHEDULE_RETRY): _S.RETRY_SCHEDULED,
        (_S.NEW, _E.FAIL): _S.FAILED,
        (_S.STARTED, _E.DEFER): _S.STARTED,
        (_S.STARTED, _E.COMPLETE): _S.COMPLETED,
        (_S.STARTED, _E.SCHEDULE_RETRY): _S.RETRY_SCHEDULED,
        (_S.STARTED, _E.FAIL): _S.FAILED,
        (_S.RETRY_SCHEDULED, _E.START): _S.STARTED,
        (_S.RETRY_SCHEDULED, _E.COMPLETE): _S.COMPLETED,
        (_S.RETRY_SCHEDULED, _E.SCHEDULE_RETRY): _S.RETRY_SCHEDULED,
        (_S.RETRY_SCHEDULED, _E.FAIL): _S.FAILED,
        (_S.FAILED, _E.OPERATOR_RETRY): _S.RETRY_SCHEDULED,
        (_S.FAILED, _E.OPERATOR_SKIP): _S.COMPLETED,
    },
    terminal=frozenset({_S.COMPLETED, _S.FAILED}),
    operator_only=frozenset({_E.OPERATOR_RETRY, _E.OPERATOR_SKIP}),
)
