"""The planners of every repair kind: from a ledger snapshot and a request to a plan or a refusal.

Pure functions (see :mod:`ledgerflow.model.repair` for the data they return). Each refusal says
what is wrong and, where one exists, which repair to use instead. Every state change a plan
contains is checked against the machines here, and the store checks it again when it writes.
"""

from __future__ import annotations

from collections.abc import Callable

from ledgerflow.errors import IllegalTransitionError, RepairRefusedError, WaitChildrenLiveError
from ledgerflow.model.classification import Classification
from ledgerflow.model.effect import EFFECT_MACHINE, EffectEvent, EffectState
from ledgerflow.model.instance import (
    FINAL_STATUSES,
    INSTANCE_MACHINE,
    TERMINAL_STATUSES,
    InstanceEvent,
    InstanceStatus,
)
from ledgerflow.model.repair import (
    CancelChange,
    EffectChange,
    EffectView,
    InstanceChange,
    Ledger,
    RepairArgs,
    RepairKind,
    RepairPlan,
    StepChange,
    StepView,
    target_of,
)
from ledgerflow.model.step import STEP_MACHINE, StepEvent, StepKind, StepStatus

_S = InstanceStatus
_PARKED = frozenset({_S.MANUAL_INTERVENTION, _S.FORWARD_RECOVERY_REQUIRED})
# Effect states whose outcome is not settled: a person must not end the instance over them.
_UNSETTLED = frozenset({EffectState.UNKNOWN, EffectState.INTENDED, EffectState.ACCEPTED})
_DONE = frozenset({EffectState.CONFIRMED, EffectState.SATISFIED})


def _refuse(ledger: Ledger, message: str) -> RepairRefusedError:
    return RepairRefusedError(message, instance_id=ledger.instance.instance_id)


def plan_repair(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    """The plan for ``args`` against ``ledger``, or :class:`RepairRefusedError` with the reason."""
    if not args.reason.strip():
        raise _refuse(ledger, "a repair needs a reason")
    planner = _PLANNERS[args.kind]
    try:
        return planner(ledger, args)
    except IllegalTransitionError as exc:
        raise _refuse(ledger, f"the state machine forbids it: {exc.message}") from None


def _plan(
    ledger: Ledger,
    args: RepairArgs,
    *,
    fence: bool = True,
    instance: InstanceChange | None = None,
    steps: tuple[StepChange, ...] = (),
    effects: tuple[EffectChange, ...] = (),
    cancel: CancelChange | None = None,
    notes: tuple[str, ...] = (),
) -> RepairPlan:
    inst = ledger.instance
    plan = RepairPlan(
        kind=args.kind,
        instance_id=inst.instance_id,
        target=target_of(args),
        generation=inst.generation,
        status=inst.status,
        fence=fence,
        instance=instance,
        steps=steps,
        effects=effects,
        cancel=cancel,
        notes=notes,
    )
    # Each change already took its target from the table by its event; an operator-only event
    # is checked here as the store checks it again (a repair is the operator's write).
    for s in plan.steps:
        STEP_MACHINE.check_write(s.expected, s.event, s.status, by_operator=True)
    for e in plan.effects:
        EFFECT_MACHINE.check_write(e.expected, e.event, e.state, by_operator=True)
    if plan.instance is not None:
        i = plan.instance
        INSTANCE_MACHINE.check_write(i.expected, i.event, i.status, by_operator=True)
    return plan


def _not_held(ledger: Ledger) -> None:
    held = ledger.instance.held_by
    if held is not None:
        raise _refuse(
            ledger,
            f"worker {held} holds a live lease on the instance; a repair never overtakes a "
            "running worker: wait until it lets go or its lease lapses",
        )


def _resume_target(ledger: Ledger) -> InstanceStatus:
    """Where a parked instance goes back to: the state it was parked from."""
    inst = ledger.instance
    if inst.status is _S.FORWARD_RECOVERY_REQUIRED:
        return _S.RUNNING
    if inst.status is not _S.MANUAL_INTERVENTION:
        raise _refuse(ledger, f"the instance is {inst.status.value}, not parked: nothing to resume")
    if inst.parked_from in (_S.RUNNING, _S.WAITING):
        # A replay of a waiting instance finds its wait again and suspends it, timer and all.
        return _S.RUNNING
    if inst.parked_from in (_S.COMPENSATING, _S.CANCELLING):
        return inst.parked_from
    raise _refuse(
        ledger, "the timeline does not say which state the instance was parked from; use force"
    )


# The event that resumes a parked instance into each state it may go back to.
_RESUME = {
    _S.RUNNING: InstanceEvent.OPERATOR_RESUME,
    _S.COMPENSATING: InstanceEvent.OPERATOR_RESUME_COMPENSATION,
    _S.CANCELLING: InstanceEvent.OPERATOR_RESUME_CANCELLATION,
}


def _resume(ledger: Ledger, args: RepairArgs, target: InstanceStatus) -> InstanceChange:
    code = "resumed" if target is _S.RUNNING else target.value.lower()
    return InstanceChange(
        expected=ledger.instance.status,
        event=_RESUME[target],
        reason_code=code,
        reason=f"resumed by {args.actor}: {args.reason}"[:4000],
    )


def _reopen(ledger: Ledger, args: RepairArgs, *, compensation: bool) -> InstanceChange | None:
    """The instance change that lets a worker pick up a repaired step: resume a parked
    instance; an unparked one is only made due now (by the fence)."""
    inst = ledger.instance
    wanted = {_S.COMPENSATING, _S.CANCELLING} if compensation else {_S.RUNNING, _S.WAITING}
    if inst.status in _PARKED:
        target = _resume_target(ledger)
        if target not in wanted:
            what = "compensations" if compensation else "workflow steps"
            raise _refuse(
                ledger, f"the instance was parked from {target.value}: its {what} do not run there"
            )
        return _resume(ledger, args, target)
    if inst.status in wanted:
        return None
    raise _refuse(ledger, f"the instance is {inst.status.value}: it runs no such work any more")


def _effect_at(ledger: Ledger, seq: int | None) -> EffectView:
    if seq is None or seq not in ledger.effects:
        raise _refuse(ledger, f"the current run has no effect at step {seq}")
    return ledger.effects[seq]


def _step_at(ledger: Ledger, seq: int | None) -> StepView:
    if seq is None or seq not in ledger.steps:
        raise _refuse(ledger, f"the current run has no step {seq}")
    return ledger.steps[seq]


def _last_step(ledger: Ledger, seq: int) -> None:
    """Changing a step's outcome after the workflow acted on it would rewrite history."""
    later = sorted(s for s in ledger.steps if s > seq)
    if seq > 0 and later:
        raise _refuse(
            ledger,
            f"steps {later} were taken after step {seq}: the workflow already acted on its "
            "outcome, and changing it now would make the replay diverge",
        )


# -- resolve-effect -----------------------------------------------------------------------------


def _plan_resolve(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    if args.applied is None:
        raise _refuse(ledger, "say whether the effect was applied or not")
    if args.evidence_text in (None, "null", '""', "{}"):
        raise _refuse(ledger, "resolving an effect needs evidence (the participant's own record)")
    effect = _effect_at(ledger, args.seq)
    if effect.state not in _UNSETTLED:
        raise _refuse(
            ledger,
            f"effect {effect.seq} ({effect.label}) is {effect.state.value}: nothing to resolve",
        )
    step = _step_at(ledger, effect.seq)
    if step.status not in (StepStatus.STARTED, StepStatus.RETRY_SCHEDULED):
        raise _refuse(ledger, f"step {step.seq} is {step.status.value}: the journal disagrees")
    verdict = "applied" if args.applied else "not applied"
    why = f"resolved by {args.actor} as {verdict}: {args.reason}"[:500]
    effect_change = EffectChange(
        seq=effect.seq,
        expected=effect.state,
        event=EffectEvent.CONFIRM if args.applied else EffectEvent.REJECT_FINAL,
        attempt=effect.attempt,
        # The operator's evidence settles every attempt that was in doubt.
        doubt=0,
        evidence=args.evidence_text if args.applied else None,
        reason=why,
    )
    step_change = StepChange(
        seq=step.seq,
        expected=step.status,
        event=StepEvent.COMPLETE if args.applied else StepEvent.FAIL,
        attempt=effect.attempt,
        output=args.evidence_text if args.applied else None,
        error=None if args.applied else args.evidence_text,
    )
    notes: list[str] = []
    instance = None
    if args.resume and ledger.instance.status in _PARKED:
        instance = _resume(ledger, args, _resume_target(ledger))
    elif args.resume:
        notes.append(f"the instance is {ledger.instance.status.value}, not parked: no resume")
    return _plan(
        ledger,
        args,
        instance=instance,
        effects=(effect_change,),
        steps=(step_change,),
        notes=tuple(notes),
    )


# -- retry-step and run-compensation ------------------------------------------------------------


def _retry_changes(
    ledger: Ledger, step: StepView, effect: EffectView | None
) -> tuple[tuple[StepChange, ...], tuple[EffectChange, ...]]:
    """One more attempt under the original identity: same command id, same key, due now."""
    if effect is not None and effect.state is EffectState.UNKNOWN:
        raise _refuse(
            ledger,
            f"effect {effect.seq} ({effect.label}) is UNKNOWN: sending it again could apply it "
            "twice; resolve it with evidence first (resolve-effect)",
        )
    if effect is not None and effect.state is not EffectState.FAILED:
        raise _refuse(
            ledger, f"effect {effect.seq} is {effect.state.value}: only a FAILED effect is retried"
        )
    if step.status is not StepStatus.FAILED:
        raise _refuse(
            ledger, f"step {step.seq} is {step.status.value}: only a FAILED step is retried"
        )
    attempt = max(step.attempt, effect.attempt if effect else 0) + 1
    steps = (
        StepChange(
            seq=step.seq,
            expected=StepStatus.FAILED,
            event=StepEvent.OPERATOR_RETRY,
            attempt=attempt,
            due_now=True,
        ),
    )
    if effect is None:
        return steps, ()
    change = EffectChange(
        seq=effect.seq,
        expected=EffectState.FAILED,
        event=EffectEvent.OPERATOR_RETRY,
        attempt=attempt,
        doubt=0,
        evidence=None,
        reason=f"operator retry under the same key {effect.idempotency_key}",
    )
    return steps, (change,)


def _plan_retry_step(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    step = _step_at(ledger, args.seq)
    if step.seq < 0:
        raise _refuse(ledger, "that is a compensation: use run-compensation")
    if step.kind in (StepKind.TIMER, StepKind.WAIT):
        raise _refuse(ledger, f"step {step.seq} is a {step.kind.value}: deliver its event instead")
    if step.kind is StepKind.LOCK:
        raise _refuse(
            ledger, f"step {step.seq} is a lock: its grant comes from its holder's release"
        )
    _last_step(ledger, step.seq)
    effect = ledger.effects.get(step.seq) if step.kind is StepKind.EFFECT else None
    steps, effects = _retry_changes(ledger, step, effect)
    instance = _reopen(ledger, args, compensation=False)
    return _plan(ledger, args, instance=instance, steps=steps, effects=effects)


def _compensation_at(ledger: Ledger, seq: int | None) -> EffectView:
    effect = _effect_at(ledger, seq)
    if effect.compensates is None:
        raise _refuse(
            ledger,
            f"effect {effect.seq} is not a compensation (compensations are journaled at "
            f"negative positions: {-effect.seq})",
        )
    return effect


def _plan_run_compensation(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    effect = _compensation_at(ledger, args.seq)
    instance = _reopen(ledger, args, compensation=True)
    if effect.state is EffectState.PLANNED:
        # Not begun (its precondition said no, or could not be asked): the person decided it
        # applies, so it goes straight to its first dispatch, past the precondition.
        return _plan(
            ledger,
            args,
            instance=instance,
            effects=(
                EffectChange(
                    seq=effect.seq,
                    expected=EffectState.PLANNED,
                    event=EffectEvent.INTEND,
                    attempt=1,
                    doubt=0,
                    evidence=None,
                    reason=f"run by {args.actor} past its precondition: {args.reason}"[:500],
                ),
            ),
            steps=(
                StepChange(
                    seq=effect.seq,
                    expected=StepStatus.NEW,
                    event=StepEvent.SCHEDULE_RETRY,
                    attempt=1,
                    due_now=True,
                ),
            ),
            notes=("the precondition is not asked again: the operator decided it applies",),
        )
    steps, effects = _retry_changes(ledger, _step_at(ledger, effect.seq), effect)
    return _plan(ledger, args, instance=instance, steps=steps, effects=effects)


# -- skip-step and skip-compensation ------------------------------------------------------------


def _completing(status: StepStatus) -> StepEvent:
    """How a person completes a step with a substitute result: a FAILED one is skipped (an
    operator-only event); an open one completes."""
    return StepEvent.OPERATOR_SKIP if status is StepStatus.FAILED else StepEvent.COMPLETE


def _plan_skip_step(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    step = _step_at(ledger, args.seq)
    if step.seq < 0:
        raise _refuse(ledger, "that is a compensation: use skip-compensation")
    if step.kind not in (StepKind.LOCAL, StepKind.EFFECT):
        raise _refuse(ledger, f"step {step.seq} is a {step.kind.value}: deliver its event instead")
    if step.status is StepStatus.COMPLETED:
        raise _refuse(ledger, f"step {step.seq} is COMPLETED already")
    if args.result_text is None:
        raise _refuse(ledger, "skipping a step needs the substitute result")
    _last_step(ledger, step.seq)
    effects: tuple[EffectChange, ...] = ()
    effect = ledger.effects.get(step.seq) if step.kind is StepKind.EFFECT else None
    if effect is not None and effect.state is not EffectState.FAILED:
        never_sent = (
            effect.state is EffectState.INTENDED
            and step.status is StepStatus.RETRY_SCHEDULED
            and effect.doubt == 0
        )
        if not never_sent:
            raise _refuse(
                ledger,
                f"effect {effect.seq} ({effect.label}) is {effect.state.value}: it may have been "
                "applied; settle it first (resolve-effect), then skip",
            )
        # Scheduled but not sent, and no earlier attempt in doubt: it is proven not applied.
        effects = (
            EffectChange(
                seq=effect.seq,
                expected=EffectState.INTENDED,
                event=EffectEvent.REJECT_FINAL,
                attempt=effect.attempt,
                doubt=0,
                evidence=None,
                reason=f"its step was skipped by {args.actor} before attempt "
                f"{effect.attempt} was sent",
            ),
        )
    change = StepChange(
        seq=step.seq,
        expected=step.status,
        event=_completing(step.status),
        attempt=step.attempt,
        output=args.result_text,
    )
    instance = _reopen(ledger, args, compensation=False)
    return _plan(ledger, args, instance=instance, steps=(change,), effects=effects)


def _plan_skip_compensation(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    if args.evidence_text in (None, "null", '""', "{}"):
        raise _refuse(ledger, "skipping a compensation needs evidence of how it was settled")
    effect = _compensation_at(ledger, args.seq)
    if effect.state not in (EffectState.PLANNED, EffectState.FAILED):
        hint = " (resolve-effect settles one in doubt)" if effect.state in _UNSETTLED else ""
        raise _refuse(
            ledger,
            f"compensation {effect.seq} is {effect.state.value}: only a PLANNED or FAILED one is "
            f"skipped{hint}",
        )
    steps: tuple[StepChange, ...] = ()
    if effect.state is EffectState.FAILED:
        step = _step_at(ledger, effect.seq)
        steps = (
            StepChange(
                seq=step.seq,
                expected=step.status,
                event=_completing(step.status),
                attempt=step.attempt,
                output=args.evidence_text,
            ),
        )
    change = EffectChange(
        seq=effect.seq,
        expected=effect.state,
        event=(
            EffectEvent.OPERATOR_SATISFY
            if effect.state is EffectState.FAILED
            else EffectEvent.SATISFY
        ),
        attempt=effect.attempt,
        doubt=0,
        evidence=args.evidence_text,
        reason=f"settled by {args.actor}: {args.reason}"[:500],
    )
    instance = _reopen(ledger, args, compensation=True)
    return _plan(ledger, args, instance=instance, steps=steps, effects=(change,))


# -- resume, force, cancel ----------------------------------------------------------------------


def _plan_resume(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    target = _resume_target(ledger)
    notes = tuple(
        f"effect {e.seq} ({e.label}) is still UNKNOWN: the worker asks its participant again "
        "and parks the instance again if that proves nothing"
        for e in ledger.effects.values()
        if e.state is EffectState.UNKNOWN
    )
    return _plan(ledger, args, instance=_resume(ledger, args, target), notes=notes)


def _force_guard(ledger: Ledger, target: InstanceStatus, result: str | None) -> None:
    """What the ledger must show before a person may state this ending."""
    effects = sorted(ledger.effects.values(), key=lambda e: e.seq)
    unsettled = [e for e in effects if e.state in _UNSETTLED]
    if target is not _S.MANUAL_INTERVENTION and unsettled:
        e = unsettled[0]
        raise _refuse(
            ledger,
            f"effect {e.seq} ({e.label}) is {e.state.value}: its outcome is not settled; "
            "resolve it first (resolve-effect)",
        )
    confirmed = [e for e in effects if e.seq > 0 and e.state is EffectState.CONFIRMED]
    if target is _S.FAILED and confirmed:
        raise _refuse(
            ledger,
            f"FAILED says nothing happened, but effect {confirmed[0].seq} "
            f"({confirmed[0].label}) is CONFIRMED",
        )
    if target in (_S.COMPENSATED, _S.CANCELLED):
        open_ = [e for e in effects if e.seq < 0 and e.state not in _DONE]
        if open_:
            raise _refuse(
                ledger,
                f"compensation {open_[0].seq} is {open_[0].state.value}: not every "
                "compensation is done",
            )
    if target is _S.FORWARD_RECOVERY_REQUIRED and not any(
        e.classification == Classification.FORWARD_RECOVERY_ONLY.value for e in confirmed
    ):
        raise _refuse(ledger, "no forward-recovery-only effect is confirmed: there is no pivot")
    if target is _S.SUCCEEDED and result is None:
        raise _refuse(ledger, "SUCCEEDED needs the result (--result)")
    if result is not None and target not in (_S.SUCCEEDED, _S.CANCELLED):
        raise _refuse(ledger, f"{target.value} records no result")


def _plan_force(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    _not_held(ledger)
    inst = ledger.instance
    target = args.status
    if target is None or target not in TERMINAL_STATUSES:
        raise _refuse(ledger, "force takes a terminal status (to continue, use resume)")
    allowed = INSTANCE_MACHINE.targets(inst.status) & TERMINAL_STATUSES
    if target not in allowed:
        names = ", ".join(sorted(s.value for s in allowed)) or "none"
        raise _refuse(
            ledger,
            f"the instance machine has no edge from {inst.status.value} to {target.value} "
            f"(terminal states allowed from here: {names})",
        )
    _force_guard(ledger, target, args.result_text)
    _after_wait_children(ledger, target)
    notes = tuple(
        f"effect {e.seq} ({e.label}) stays CONFIRMED: the operator states it was settled by hand"
        for e in ledger.effects.values()
        if target is _S.COMPENSATED
        and e.seq > 0
        and e.state is EffectState.CONFIRMED
        and -e.seq not in ledger.effects
    )
    code = "parked_by_operator" if target is _S.MANUAL_INTERVENTION else "forced"
    change = InstanceChange(
        expected=inst.status,
        event=INSTANCE_MACHINE.event_to(inst.status, target),
        reason_code=code,
        reason=f"forced {target.value} by {args.actor}: {args.reason}"[:4000],
        result=args.result_text,
    )
    return _plan(ledger, args, instance=change, notes=notes)


def _after_wait_children(ledger: Ledger, target: InstanceStatus) -> None:
    """A final ending comes after the "wait" children's, whoever writes it: refused (rather
    than cancelling them, which their policy did not ask for) while one is live. A park is
    no ending, so parking the parent is not refused."""
    live = ledger.live_wait_children
    if target not in FINAL_STATUSES or not live:
        return
    shown = ", ".join(live[:5]) + (f" and {len(live) - 5} more" if len(live) > 5 else "")
    raise WaitChildrenLiveError(
        f"ending it {target.value} would end it before its children started with "
        f'on_parent_end="wait": {shown} not ended yet; let them end (or end them) first',
        instance_id=ledger.instance.instance_id,
        children=live,
    )


def _plan_cancel(ledger: Ledger, args: RepairArgs) -> RepairPlan:
    inst = ledger.instance
    cancel = CancelChange(compensate=args.compensate, reason=f"{args.reason} (by {args.actor})")
    if inst.status in _PARKED:
        _not_held(ledger)
        target = _resume_target(ledger)
        if target is not _S.RUNNING:
            raise _refuse(
                ledger, f"the instance was parked while {target.value}: resume it instead"
            )
        if inst.cancel_requested:
            raise _refuse(ledger, "a cancel request exists already (the first one wins): resume")
        # A parked instance cannot take a cancel request; resumed, its worker honours it.
        return _plan(ledger, args, instance=_resume(ledger, args, target), cancel=cancel)
    if inst.status in TERMINAL_STATUSES:
        raise _refuse(ledger, f"the instance already ended {inst.status.value}: nothing to cancel")
    if inst.cancel_requested:
        raise _refuse(
            ledger,
            "a cancel request exists already "
            f"({'with' if inst.cancel_compensate else 'without'} compensation); the first wins",
        )
    # The owner, if any, honours the request at its next step: no fence, no overtaking.
    return _plan(ledger, args, fence=False, cancel=cancel)


_PLANNERS: dict[RepairKind, Callable[[Ledger, RepairArgs], RepairPlan]] = {
    RepairKind.RESOLVE_EFFECT: _plan_resolve,
    RepairKind.RETRY_STEP: _plan_retry_step,
    RepairKind.SKIP_STEP: _plan_skip_step,
    RepairKind.RUN_COMPENSATION: _plan_run_compensation,
    RepairKind.SKIP_COMPENSATION: _plan_skip_compensation,
    RepairKind.RESUME: _plan_resume,
    RepairKind.FORCE_TERMINAL: _plan_force,
    RepairKind.CANCEL: _plan_cancel,
}
