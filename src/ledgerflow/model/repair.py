"""Repairs as data: what an operator may change about an instance, and the exact plan of it.

An operator never edits rows. A repair is a request (kind, target, arguments, who and why)
that this module turns into a :class:`RepairPlan`, the exact list of changes to the instance,
its steps and effects, or refuses with :class:`~ledgerflow.errors.RepairRefusedError` saying
why. Planning is pure: it reads a snapshot of the ledger (:class:`Ledger`, small views built by
the caller from the store's records) and the state machines, so a dry run and the real thing
decide the same way, and the store applies the plan only if the snapshot still holds.

The rules each planner keeps, beyond the machines' edges: an effect in doubt is never sent
again (it is resolved with evidence first); no fresh idempotency key is ever made; a step the
workflow already moved past is never rewritten; a worker holding a live lease is never
overtaken. The planners live in :mod:`ledgerflow.model.repair_rules`.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgerflow.model.effect import EFFECT_MACHINE, EffectEvent, EffectState
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceEvent, InstanceStatus
from ledgerflow.model.step import STEP_MACHINE, StepEvent, StepKind, StepStatus


class RepairKind(enum.Enum):
    RESOLVE_EFFECT = "resolve-effect"
    RETRY_STEP = "retry-step"
    SKIP_STEP = "skip-step"
    RUN_COMPENSATION = "run-compensation"
    SKIP_COMPENSATION = "skip-compensation"
    RESUME = "resume"
    FORCE_TERMINAL = "force-terminal"
    CANCEL = "cancel"


# -- what planning reads ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceView:
    instance_id: str
    status: InstanceStatus
    generation: int
    # The worker that holds a lease that has not lapsed (None: nobody may still write).
    held_by: str | None
    # The status the instance was in when it was last parked (from its timeline), if parked.
    parked_from: InstanceStatus | None
    cancel_requested: bool
    cancel_compensate: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StepView:
    seq: int
    kind: StepKind
    name: str
    status: StepStatus
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectView:
    seq: int
    participant: str
    operation: str
    classification: str
    idempotency_key: str
    state: EffectState
    attempt: int
    doubt: int
    # For a compensation: the effect it undoes.
    compensates: str | None = None

    @property
    def label(self) -> str:
        return f"{self.participant}.{self.operation}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Ledger:
    """What planning may look at: one instance and its current run's journal."""

    instance: InstanceView
    steps: Mapping[int, StepView]
    effects: Mapping[int, EffectView]
    # Its children started with on_parent_end="wait" that have not ended: no repair may end
    # the instance before them.
    live_wait_children: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairArgs:
    """A request as planning sees it: payloads already encoded as ledger text."""

    kind: RepairKind
    actor: str
    reason: str
    seq: int | None = None
    applied: bool | None = None
    evidence_text: str | None = None
    result_text: str | None = None
    status: InstanceStatus | None = None
    compensate: bool = True
    resume: bool = False


# -- what planning decides ----------------------------------------------------------------------


# Each change names its event; the state it reaches is the machine's answer (kept as a field
# too, so the audit log's plan shows both).


@dataclass(frozen=True, slots=True, kw_only=True)
class StepChange:
    seq: int
    expected: StepStatus
    event: StepEvent
    attempt: int
    output: str | None = None
    error: str | None = None
    # RETRY_SCHEDULED due at the moment the repair is applied.
    due_now: bool = False
    status: StepStatus = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", STEP_MACHINE.check(self.expected, self.event))


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectChange:
    seq: int
    expected: EffectState
    event: EffectEvent
    attempt: int
    doubt: int
    evidence: str | None
    reason: str
    state: EffectState = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", EFFECT_MACHINE.check(self.expected, self.event))


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceChange:
    expected: InstanceStatus
    event: InstanceEvent
    reason_code: str
    reason: str
    result: str | None = None
    status: InstanceStatus = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", INSTANCE_MACHINE.check(self.expected, self.event))


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelChange:
    """The cancel request a repair makes; its write records it as it is."""

    compensate: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairPlan:
    """The exact changes of one repair, and the state they were planned against.

    ``generation`` and ``status`` are the precondition: the store applies the plan only while
    the instance is still there, and each step and effect change names the state it replaces.
    ``fence`` bumps the generation, so a worker holding an older one can no longer write.
    """

    kind: RepairKind
    instance_id: str
    target: str
    generation: int
    status: InstanceStatus
    fence: bool
    instance: InstanceChange | None = None
    steps: tuple[StepChange, ...] = ()
    effects: tuple[EffectChange, ...] = ()
    cancel: CancelChange | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def generation_after(self) -> int:
        return self.generation + 1 if self.fence else self.generation

    def describe(self) -> list[str]:
        """The plan as lines a person reads before applying it."""
        lines = [
            f"{self.kind.value} on {self.instance_id} ({self.target})",
            f"precondition: instance is {self.status.value} at generation {self.generation} "
            "and no worker holds a live lease on it",
        ]
        if self.instance is not None:
            i = self.instance
            lines.append(
                f"instance: {i.expected.value} -> {i.status.value} ({i.reason_code}: {i.reason})"
            )
        for e in self.effects:
            what = f"effect {e.seq}: {e.expected.value} -> {e.state.value}, attempt {e.attempt}"
            if e.evidence is not None:
                what += f", evidence {e.evidence}"
            lines.append(f"{what} ({e.reason})")
        for s in self.steps:
            what = f"step {s.seq}: {s.expected.value} -> {s.status.value}, attempt {s.attempt}"
            if s.output is not None:
                what += f", output {s.output}"
            if s.due_now:
                what += ", due now"
            lines.append(what)
        if self.cancel is not None:
            undo = "with" if self.cancel.compensate else "without"
            lines.append(f"cancel request ({undo} compensation): {self.cancel.reason}")
        if self.fence:
            lines.append(
                f"generation {self.generation} -> {self.generation_after}: a worker of an older "
                "generation is fenced out; the instance is claimable at once"
            )
        lines.extend(f"note: {n}" for n in self.notes)
        return lines

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON object for the audit log (enums by value)."""

        def plain(value: Any) -> Any:
            if isinstance(value, enum.Enum):
                return value.value
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [plain(v) for v in value]
            return value

        data: dict[str, Any] = plain(asdict(self))
        data["generation_after"] = self.generation_after
        data["describe"] = self.describe()
        return data


def fingerprint(
    *, kind: RepairKind, instance_id: str, target: str, arguments: Mapping[str, Any]
) -> str:
    """What makes two requests "the same repair": kind, instance, target and arguments, never
    who asked or why, so a second operator repeating the first one's repair is recognised."""
    text = json.dumps(
        {"kind": kind.value, "instance": instance_id, "target": target, "args": arguments},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def target_of(args: RepairArgs) -> str:
    """The thing a repair acts on, as the audit log names it."""
    if args.seq is None:
        return "instance"
    if args.kind in (RepairKind.RUN_COMPENSATION, RepairKind.SKIP_COMPENSATION):
        return f"compensation:{args.seq}"
    if args.kind is RepairKind.RESOLVE_EFFECT:
        return f"effect:{args.seq}"
    return f"step:{args.seq}"
