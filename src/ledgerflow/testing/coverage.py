"""Coverage: which effects, compensations, waits and pivots of a workflow the runs reached
(internal).

A verification report may only claim what was explored (docs/design.md, invariant 9), so every run
of the explorer is read back after quiescence: for each item of the workflow, whether the run
reached it (its intent, its wait or its compensation is in a journal), completed it, crashed
at it (a crash or an engine error fired at one of its fault points) and recovered past it
(after that fault the item was settled and the instance went on: a later position, or an
ending). Summed over runs, an item no run reached is a gap the report names.

Which items a workflow has is learnt, not parsed from its source (see :func:`declared`):

- what the runs journaled: every effect, compensation and wait (``wait:<event>``, and the
  timers ``sleep``/``sleep_until``) at any position of any instance, by name;
- the effects the workflow's code names: an effect declaration or a participant its function
  (or a function of its module it calls, or a closure) refers to by name, with each one's
  compensation;
- the effects of every participant a run used whose effects the code does not name (the
  workflow reached it through something the walk cannot follow: a table of declarations, a
  helper in another module), with their compensations. Where the code names effects of a
  participant, those are taken as the workflow's: listing the participant's other operations
  (used by other workflows) would warn about effects this workflow can never call.

So an effect behind a branch no input takes is still listed (its declaration is named by the
code, or its participant is reached only indirectly), and reported as reached by 0 runs. A wait is
known only once a run reaches it: a wait no run reached cannot be listed, which is why the
explorer delivers what every wait it meets asks for. Items are identified by name, with the
positions where runs met them: one effect called at two positions is one item.
"""

from __future__ import annotations

import enum
import math
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ledgerflow.ledger.records import EffectRecord, InstanceRecord, Journal
from ledgerflow.model.classification import Classification
from ledgerflow.model.definition import (
    EffectDeclaration,
    Participant,
    Registry,
    WorkflowDefinition,
)
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import StepSeq
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.storage.store import Store
from ledgerflow.testing.plans import Hit

# How deep the walk of the workflow's code follows the functions of its module it calls.
REFERENCE_DEPTH_MAX = 5
# Instances read back per run (a scenario holds a few hundred at most).
INSTANCES_READ_MAX = 1_000_000


class ItemKind(enum.Enum):
    EFFECT = "effect"
    # A forward-recovery-only effect: once confirmed, the workflow may only go forward.
    PIVOT = "pivot"
    COMPENSATION = "compensation"
    # A wait for an event, or a timer.
    WAIT = "wait"


EFFECT_KINDS = frozenset({ItemKind.EFFECT, ItemKind.PIVOT, ItemKind.COMPENSATION})
# Where an item the catalogue lists came from (the best one kept: code over participant).
FROM_CODE = "code"
FROM_PARTICIPANT = "participant"
FROM_RUNS = "runs"
_ORIGIN_RANK = {FROM_CODE: 0, FROM_PARTICIPANT: 1, FROM_RUNS: 2}
_SETTLED_STEPS = frozenset({StepStatus.COMPLETED, StepStatus.FAILED})
_SETTLED_EFFECTS = frozenset({EffectState.CONFIRMED, EffectState.FAILED, EffectState.SATISFIED})
_BEGUN = frozenset(EffectState) - {EffectState.NEW, EffectState.PLANNED}


@dataclass(frozen=True, slots=True)
class Item:
    """One effect, pivot, compensation or wait of a workflow, by name."""

    kind: ItemKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value} {self.name}"


def item_of(declaration: EffectDeclaration) -> Item:
    name = f"{declaration.participant.name}.{declaration.operation}"
    if declaration.is_compensation:
        return Item(ItemKind.COMPENSATION, name)
    if declaration.classification.is_pivot:
        return Item(ItemKind.PIVOT, name)
    return Item(ItemKind.EFFECT, name)


def _effect_item(record: EffectRecord) -> Item:
    name = f"{record.participant}.{record.operation}"
    if record.compensates is not None:
        return Item(ItemKind.COMPENSATION, name)
    pivot = record.classification == Classification.FORWARD_RECOVERY_ONLY.value
    return Item(ItemKind.PIVOT if pivot else ItemKind.EFFECT, name)


# -- the catalogue ------------------------------------------------------------------------------


def _with_compensations(declarations: Iterable[EffectDeclaration]) -> Iterator[EffectDeclaration]:
    for declaration in declarations:
        if declaration.is_compensation:
            continue
        yield declaration
        name = declaration.compensation
        undo = declaration.participant.effects.get(name) if name else None
        if undo is not None and undo.is_compensation:
            yield undo


def referenced(function: Callable[..., Any]) -> list[EffectDeclaration]:
    """The effects a workflow function's code names: declarations and participants it (or a
    closure, or a function of its own module it calls) refers to, read from its code objects'
    names, never from its source text."""
    found: dict[int, EffectDeclaration] = {}
    seen: set[types.CodeType] = set()
    module = getattr(function, "__module__", None)

    def consider(value: object, depth: int) -> None:
        if isinstance(value, EffectDeclaration):
            found.setdefault(id(value), value)
        elif isinstance(value, Participant):
            for declaration in value.effects.values():
                found.setdefault(id(declaration), declaration)
        elif isinstance(value, types.FunctionType) and value.__module__ == module:
            visit(value, depth + 1)

    def walk(code: types.CodeType, scope: dict[str, object], depth: int) -> None:
        if code in seen:
            return
        seen.add(code)
        for name in (*code.co_names, *code.co_freevars):
            if name in scope:
                consider(scope[name], depth)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                walk(constant, scope, depth)

    def visit(fn: types.FunctionType, depth: int) -> None:
        if depth > REFERENCE_DEPTH_MAX:
            return
        scope = dict(fn.__globals__)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            try:
                scope[name] = cell.cell_contents
            except ValueError:  # a closure variable not bound yet
                continue
        walk(fn.__code__, scope, depth)

    if isinstance(function, types.FunctionType):
        visit(function, 0)
    return list(found.values())


def declared(definitions: Iterable[WorkflowDefinition]) -> dict[Item, str]:
    """The items the code of these workflow definitions names, with their compensations; the
    participants a run uses add theirs (:func:`observe`)."""
    catalogue: dict[Item, str] = {}
    for definition in definitions:
        for declaration in _with_compensations(referenced(definition.function)):
            catalogue[item_of(declaration)] = FROM_CODE
    return catalogue


# -- one run ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reach:
    """One item in one run (over all its instances)."""

    positions: set[int] = field(default_factory=set)
    reached: bool = False
    completed: bool = False
    crashed: bool = False
    recovered: bool = False
    # A fault touched it (a crash at it, a retry, a doubt) and its instance still ended.
    touched_terminal: bool = False


@dataclass(frozen=True, slots=True)
class EffectAt:
    """A forward effect one instance journaled: where the refusal sweep can refuse it."""

    instance: str
    seq: int
    participant: str
    operation: str
    key: str


@dataclass(slots=True)
class RunCoverage:
    items: dict[Item, Reach] = field(default_factory=dict)
    # Items the catalogue lists whether or not this run reached them, by origin.
    declared: dict[Item, str] = field(default_factory=dict)
    non_terminal: int = 0
    effects_at: list[EffectAt] = field(default_factory=list)
    # Events the explorer sent with its default arrival (nothing scripted for them).
    defaulted: set[str] = field(default_factory=set)

    def reach(self, item: Item) -> Reach:
        return self.items.setdefault(item, Reach())


@dataclass(slots=True)
class _Instance:
    record: InstanceRecord
    journal: Journal

    @property
    def terminal(self) -> bool:
        return self.record.status in TERMINAL_STATUSES

    def went_on(self, seq: int) -> bool:
        return self.terminal or any(s > seq for s in self.journal.steps)


def observe(
    store: Store, *, registry: Registry, catalogue: dict[Item, str], faults: Iterable[Hit]
) -> RunCoverage:
    """Read one quiet run back: what each item of its workflows reached, and where its faults
    (crashes and engine errors) fired."""
    run = RunCoverage(declared=dict(catalogue))
    records = store.list_instances(limit=INSTANCES_READ_MAX)
    journals = store.journals([(r.instance_id, r.run) for r in records])
    instances = {str(r.business_key): _Instance(r, journals[r.instance_id, r.run]) for r in records}
    used: set[str] = set()
    for instance in instances.values():
        run.non_terminal += not instance.terminal
        used.update(e.participant for e in instance.journal.effects.values())
        _reached(run, instance)
    for hit in faults:
        _faulted(run, hit, instances)
    named = {
        item.name.partition(".")[0] for item, origin in catalogue.items() if origin == FROM_CODE
    }
    for name in sorted(used - named):
        participant = registry.participants.get(name)
        for declaration in _with_compensations(participant.effects.values() if participant else ()):
            run.declared.setdefault(item_of(declaration), FROM_PARTICIPANT)
    return run


def _reached(run: RunCoverage, instance: _Instance) -> None:
    key = instance.record.business_key
    for step in instance.journal.steps.values():
        if step.kind in (StepKind.WAIT, StepKind.TIMER):
            reach = run.reach(Item(ItemKind.WAIT, step.name))
            reach.positions.add(step.seq)
            reach.reached = True
            reach.completed |= step.status is StepStatus.COMPLETED
    for effect in instance.journal.effects.values():
        if effect.state not in _BEGUN:
            continue
        item = _effect_item(effect)
        reach = run.reach(item)
        reach.positions.add(abs(effect.seq))
        reach.reached = True
        reach.completed |= effect.state in (EffectState.CONFIRMED, EffectState.SATISFIED)
        # Retried, in doubt or refused: a participant's fault reached it.
        faulted = effect.attempt > 1 or effect.state in (EffectState.UNKNOWN, EffectState.FAILED)
        reach.touched_terminal |= faulted and instance.terminal
        if item.kind is not ItemKind.COMPENSATION:
            run.effects_at.append(
                EffectAt(
                    key, effect.seq, effect.participant, effect.operation, effect.idempotency_key
                )
            )


def _faulted(run: RunCoverage, hit: Hit, instances: dict[str, _Instance]) -> None:
    """Mark the item whose fault point ``hit`` is; local steps and whole-instance points
    (a claim, a finish) belong to no item."""
    where = dict(hit.where)
    instance = instances.get(str(where.get("instance")))
    seq = where.get("seq")
    if instance is None or not isinstance(seq, int):
        return
    settled: bool
    if hit.point.startswith("compensation."):
        effect = instance.journal.effects.get(StepSeq(-seq))
        if effect is None:
            return
        item, settled = _effect_item(effect), effect.state in _SETTLED_EFFECTS
        moved_on = instance.terminal
    else:
        step = instance.journal.steps.get(StepSeq(seq))
        effect = instance.journal.effects.get(StepSeq(seq))
        if step is None:
            return
        if step.kind is StepKind.EFFECT and effect is not None:
            item = _effect_item(effect)
        elif step.kind in (StepKind.WAIT, StepKind.TIMER):
            item = Item(ItemKind.WAIT, step.name)
        else:
            return
        settled, moved_on = step.status in _SETTLED_STEPS, instance.went_on(seq)
    reach = run.reach(item)
    reach.crashed = True
    reach.recovered |= settled and moved_on
    reach.touched_terminal |= item.kind in EFFECT_KINDS and instance.terminal


# -- over many runs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One item over the runs of an exploration, as the report states it."""

    kind: str
    name: str
    origin: str
    positions: tuple[int, ...]
    reached: int
    completed: int
    crashed: int
    recovered: int


@dataclass(slots=True)
class _Counts:
    origin: str
    positions: set[int] = field(default_factory=set)
    reached: int = 0
    completed: int = 0
    crashed: int = 0
    recovered: int = 0
    touched_terminal: int = 0


@dataclass(slots=True)
class Coverage:
    """Items summed over runs: how many runs reached, completed, crashed at and recovered past
    each; and the runs that ended with an instance not terminal (WAITING with nothing left to
    deliver)."""

    runs: int = 0
    runs_non_terminal: int = 0
    instances_non_terminal: int = 0
    counts: dict[Item, _Counts] = field(default_factory=dict)
    defaulted: set[str] = field(default_factory=set)

    def _counts(self, item: Item, origin: str) -> _Counts:
        found = self.counts.setdefault(item, _Counts(origin))
        if _ORIGIN_RANK[origin] < _ORIGIN_RANK[found.origin]:
            found.origin = origin
        return found

    def add(self, run: RunCoverage) -> None:
        self.runs += 1
        self.runs_non_terminal += run.non_terminal > 0
        self.instances_non_terminal += run.non_terminal
        self.defaulted |= run.defaulted
        for item, origin in run.declared.items():
            self._counts(item, origin)
        for item, reach in run.items.items():
            counts = self._counts(item, run.declared.get(item, FROM_RUNS))
            counts.positions |= reach.positions
            counts.reached += reach.reached
            counts.completed += reach.completed
            counts.crashed += reach.crashed
            counts.recovered += reach.recovered
            counts.touched_terminal += reach.touched_terminal

    def merge(self, other: Coverage) -> None:
        self.runs += other.runs
        self.runs_non_terminal += other.runs_non_terminal
        self.instances_non_terminal += other.instances_non_terminal
        self.defaulted |= other.defaulted
        for item, theirs in other.counts.items():
            mine = self._counts(item, theirs.origin)
            mine.positions |= theirs.positions
            for name in ("reached", "completed", "crashed", "recovered", "touched_terminal"):
                setattr(mine, name, getattr(mine, name) + getattr(theirs, name))

    def unreached(self) -> list[Item]:
        return [row_item for row_item, counts in self._ordered() if counts.reached == 0]

    @property
    def non_vacuity(self) -> float:
        """Share of the workflow's own effects (effects, pivots, compensations) that a fault
        touched in some run whose instance still reached a terminal state: 1.0 only when the
        faults reached every one of them."""
        effects = [c for item, c in self.counts.items() if item.kind in EFFECT_KINDS]
        return sum(c.touched_terminal > 0 for c in effects) / len(effects) if effects else 0.0

    def _ordered(self) -> list[tuple[Item, _Counts]]:
        # In the order a run meets them: forward items by position, then compensations
        # (which run in reverse), then what no run reached.
        def key(entry: tuple[Item, _Counts]) -> tuple[bool, bool, float, str]:
            item, counts = entry
            first = min(counts.positions, default=math.inf)
            undoing = item.kind is ItemKind.COMPENSATION
            return (not counts.positions, undoing, -first if undoing else first, item.name)

        return sorted(self.counts.items(), key=key)

    def rows(self) -> list[CoverageRow]:
        return [
            CoverageRow(
                kind=item.kind.value,
                name=item.name,
                origin=counts.origin,
                positions=tuple(sorted(counts.positions)),
                reached=counts.reached,
                completed=counts.completed,
                crashed=counts.crashed,
                recovered=counts.recovered,
            )
            for item, counts in self._ordered()
        ]
