"""Which forms an instance's page offers: only those the principal's role and the instance's
state allow (internal).

A form that can only fail is worse than none: Cancel on an ended instance, ``force-terminal``
to an operator (whose role does not hold it), ``retry-step`` on a run with no failed step.
The rules here mirror the repair planner's preconditions (:mod:`ledgerflow.model.repair_rules`)
closely enough to leave out what cannot succeed; the planner still decides every request,
so a page that is stale by the time it is sent gets the planner's refusal, never a repair it
should not have.

The signal form names the wait the instance is in (its event, and for an approval the
approvers): an approval is offered only to a principal it names, since the inbox would refuse
anyone else's decision and record it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ledgerflow.model.authority import API_ROLE_REPAIRS, Principal
from ledgerflow.model.codec import JSON
from ledgerflow.model.effect import EffectState
from ledgerflow.model.instance import (
    FINAL_STATUSES,
    INSTANCE_MACHINE,
    TERMINAL_STATUSES,
    InstanceStatus,
)
from ledgerflow.model.repair import RepairKind
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.operators.service import ApiRole, InstanceOverview

PARKED = frozenset({InstanceStatus.MANUAL_INTERVENTION, InstanceStatus.FORWARD_RECOVERY_REQUIRED})
# The kinds that act on one position of the journal (the form's step field is required).
NEEDS_STEP = frozenset(
    {
        RepairKind.RESOLVE_EFFECT,
        RepairKind.RETRY_STEP,
        RepairKind.SKIP_STEP,
        RepairKind.RUN_COMPENSATION,
        RepairKind.SKIP_COMPENSATION,
    }
)
_UNSETTLED = frozenset({EffectState.UNKNOWN, EffectState.INTENDED, EffectState.ACCEPTED})
_WORK = frozenset({StepKind.LOCAL, StepKind.EFFECT})


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """The wait an instance's run is in: the event it waits for, and who may approve it."""

    seq: int
    event: str
    approvers: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepChoice:
    seq: int
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Offers:
    """What the page offers the principal on one instance."""

    cancel: bool = False
    signal: bool = False
    # The open wait (None: none), and whether the principal may answer it as an approval.
    wait: Wait | None = None
    approver: bool = False
    # Repair kinds, each with the steps it may act on (empty for a kind that takes none).
    repairs: dict[str, list[StepChoice]] = field(default_factory=dict)
    terminal: list[str] = field(default_factory=list)

    @property
    def steps(self) -> list[StepChoice]:
        """Every step some offered kind may act on, once each, in journal order."""
        seen = {c.seq: c for choices in self.repairs.values() for c in choices}
        return [seen[s] for s in sorted(seen)]

    @property
    def step_optional(self) -> bool:
        return any(kind not in {k.value for k in NEEDS_STEP} for kind in self.repairs)


def open_wait(page: InstanceOverview) -> Wait | None:
    """The run's wait step still open (STARTED), if any, as its journaled spec says."""
    for step in reversed(page.steps):
        if step.kind is StepKind.WAIT and step.status is StepStatus.STARTED and step.input:
            spec = JSON.decode(step.input)
            if isinstance(spec, dict) and isinstance(spec.get("event"), str):
                approvers = [str(a) for a in spec.get("approvers") or []]
                return Wait(seq=step.seq, event=spec["event"], approvers=approvers)
    return None


def offers(page: InstanceOverview, principal: Principal) -> Offers:
    """The forms ``principal`` is offered on ``page``'s instance."""
    record = page.instance
    if record.status in FINAL_STATUSES:
        return Offers()
    wait = open_wait(page)
    signaller = principal.role.allows(ApiRole.SIGNALLER)
    operator = principal.role.allows(ApiRole.OPERATOR)
    allowed = API_ROLE_REPAIRS[principal.role]
    repairs = {
        kind.value: choices
        for kind, choices in _repair_choices(page).items()
        if kind in allowed and (choices or kind not in NEEDS_STEP)
    }
    return Offers(
        cancel=operator and record.status not in PARKED and record.cancel_requested_at is None,
        signal=signaller,
        wait=wait,
        approver=wait is not None and principal.name in wait.approvers,
        repairs=repairs,
        # The terminal states the instance machine has an edge to from here (force's rule).
        terminal=sorted(
            s.value for s in INSTANCE_MACHINE.targets(record.status) & TERMINAL_STATUSES
        ),
    )


def _repair_choices(page: InstanceOverview) -> dict[RepairKind, list[StepChoice]]:
    """Each repair kind the instance's state admits, with the positions it may act on."""
    record = page.instance
    steps = {int(s.seq): s for s in page.steps}
    effects = page.effects

    def label(seq: int) -> StepChoice:
        step = steps.get(seq)
        effect = next((e for e in effects if e.seq == seq), None)
        state = effect.state.value if effect else (step.status.value if step else "")
        name = f"{effect.participant}.{effect.operation}" if effect else (step.name if step else "")
        return StepChoice(seq=seq, label=f"{seq} {name} ({state})")

    def unsettled(seq: int) -> bool:
        step = steps.get(seq)
        return step is not None and step.status in (StepStatus.STARTED, StepStatus.RETRY_SCHEDULED)

    work = [s for s in page.steps if s.seq > 0 and s.kind in _WORK]
    compensations = [e for e in effects if e.compensates is not None]
    parked = record.status in PARKED
    choices = {
        RepairKind.RESOLVE_EFFECT: [
            label(e.seq) for e in effects if e.state in _UNSETTLED and unsettled(e.seq)
        ],
        RepairKind.RETRY_STEP: [label(s.seq) for s in work if s.status is StepStatus.FAILED],
        RepairKind.SKIP_STEP: [label(s.seq) for s in work if s.status is not StepStatus.COMPLETED],
        RepairKind.RUN_COMPENSATION: [
            label(e.seq)
            for e in compensations
            if e.state in (EffectState.PLANNED, EffectState.FAILED)
        ],
        RepairKind.SKIP_COMPENSATION: [
            label(e.seq)
            for e in compensations
            if e.state in (EffectState.PLANNED, EffectState.FAILED)
        ],
    }
    # Kinds that take no step: offered only where they apply at all.
    kinds = dict(choices)
    if parked:
        kinds[RepairKind.RESUME] = []
        if record.cancel_requested_at is None:
            kinds[RepairKind.CANCEL] = []
    if INSTANCE_MACHINE.targets(record.status) & TERMINAL_STATUSES:
        kinds[RepairKind.FORCE_TERMINAL] = []
    return kinds
