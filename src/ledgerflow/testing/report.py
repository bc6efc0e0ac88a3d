"""The consistency report of one workflow definition: what ``ledgerflow verify`` states.

This module owns the report as data, built by pure functions from the declarations in a
registry and, when the fault explorer ran, from its summaries. It prints nothing, so the CLI
renders it for people and as JSON, and a test can check it without a terminal.

The report answers the questions an operator asks before trusting a workflow: how its
identities and idempotency keys are derived, how each effect can be undone, how an UNKNOWN
outcome of each effect gets settled (and whether that needs a person), what the limits are,
and what the explorer found when it crashed the workflow at every fault point. Everything is
derived from what the engine really consults (participant capabilities, retry policies,
``limits``), never from a separate description that could drift from the code.

It describes the verified workflow, not its module: the effects listed are the workflow's own,
and its **coverage** says, for each effect, pivot, compensation and wait, how many runs
reached it, completed it, crashed at it and recovered past it. Which items a workflow has is
learnt as :mod:`ledgerflow.testing.coverage` explains: what any run journaled (by name, with
the positions seen), the effects (and their compensations) the workflow's code names, and the
effects of a participant a run used that the code names none of. Nothing is parsed from the
source, yet an effect the code can reach but no run reached is still listed, with 0 runs and
a warning by name; a wait is listed once some run reached it (the explorer answers every wait
it meets, so a wait no run reached sits behind something itself reported unreached). Without
exploration, the effects are those the code names. The ``non vacuity`` figure is computed over
the same effects: the share of them a fault touched in a run that still ended.

Example::

    definition = registry.get("order")
    report = build_report(registry, definition, summaries=[summary])
    print(report.warnings, report.to_dict()["effects"])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ledgerflow import limits
from ledgerflow.model.classification import Classification
from ledgerflow.model.defects import WORKFLOW_DEFECT, OnDefect, declared_names
from ledgerflow.model.definition import (
    EffectDeclaration,
    Participant,
    Registry,
    WorkflowDefinition,
)
from ledgerflow.model.ids import (
    DEFAULT_TENANT,
    IdempotencyKey,
    InstanceId,
    RunNumber,
    StepSeq,
    TenantId,
    compensation_key,
    effect_id,
    idempotency_key,
)
from ledgerflow.model.retry import RetryPolicy
from ledgerflow.testing.coverage import (
    EFFECT_KINDS,
    FROM_CODE,
    Coverage,
    CoverageRow,
    Item,
    ItemKind,
    declared,
)
from ledgerflow.testing.explorer import Summary
from ledgerflow.testing.simulation import RunResult

RESOLVED_BY_LOOKUP = "lookup (same key again if not applied; operator if it cannot tell)"
RESOLVED_BY_DEDUPE = "re-dispatch under the same key (participant deduplicates)"
RESOLVED_BY_OPERATOR = "operator (parked in MANUAL_INTERVENTION)"
NO_COMPENSATION = "none declared"

# The instance id rule is engine.instance_id_for in words; tests/cli/test_verify.py holds the
# two together.
INSTANCE_ID_RULE = (
    "wf_ + the first 26 hex digits of sha256(tenant NUL workflow NUL business key): "
    "starting the same business key again names the same instance"
)
OWNERS = "a worker holds an instance through a lease with a fencing generation"
PINNING = (
    "an instance runs only under the version and fingerprint it started with: only workers "
    "serving both claim it, and it moves to other code only by a replay-proven upgrade or "
    "migration"
)

# A failing run's trace shows at most this many fault point hits before its last fault.
TRACE_LINES_MAX = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectReport:
    """One declared effect: how it can be undone, how its doubt is settled, its limits."""

    effect: str
    participant: str
    operation: str
    classification: str
    pivot: bool
    deduplicates: bool
    has_lookup: bool
    unknown_resolution: str
    compensation: str
    attempts_max: int
    backoff: str
    timeout_seconds: float
    retry: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class ConsistencyReport:
    """What ``ledgerflow verify`` prints for one workflow definition."""

    workflow: str
    version: int
    fingerprint: str
    newest_version: int
    identities: dict[str, str]
    effects: list[EffectReport]
    step_retry: dict[str, Any]
    lease_seconds_default: float
    owners: str
    pinning: str
    warnings: list[str]
    figures: list[dict[str, object]] = field(default_factory=list)
    # Which exceptions from the workflow's code compensate or fail it (its business
    # failures), and what any other exception (a defect) does.
    business_failures: list[str] = field(default_factory=list)
    defects: str = ""
    # What the explorer's runs reached, item by item (None: nothing was explored).
    coverage: CoverageReport | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (what ``ledgerflow verify --json`` prints)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoverageReport:
    """The coverage section: every item of the workflow over every run of every mode."""

    runs: int
    runs_non_terminal: int
    instances_non_terminal: int
    items: list[CoverageRow]
    # The items no run reached ("effect payment.upgrade"), each also a warning.
    unreached: list[str]
    non_vacuity: float
    # How many of the items are the workflow's own effects (what non_vacuity is a share of).
    effects: int
    # Events the explorer sent with its default arrival (a null payload): nothing was
    # scripted for them with --arrivals or an example's events.
    defaulted_events: list[str]


def idempotency_key_pattern() -> str:
    """The shape of every effect's idempotency key, read off the functions that build keys.

    Keys are built from sentinel identities and the sentinels are then named, so the report
    follows any change of ``ids.py`` instead of restating it.
    """
    run, seq = 7_777_771, 7_777_772
    key = idempotency_key(
        tenant=TenantId("\x01tenant"),
        effect=effect_id(InstanceId("\x01instance"), RunNumber(run), StepSeq(seq)),
        participant="\x01participant",
        operation="\x01operation",
    )
    for name in ("tenant", "instance", "participant", "operation"):
        key = IdempotencyKey(key.replace(f"\x01{name}", "{" + name + "}"))
    return key.replace(str(run), "{run}").replace(str(seq), "{seq}")


def unknown_resolution(
    participant: Participant, classification: Classification | None = None
) -> str:
    """How the engine settles an UNKNOWN outcome of an effect at this participant, in words.

    The order is that of :func:`ledgerflow.model.effect.resolve_unknown`: the participant's
    evidence first (a lookup that still cannot tell once its ``lookup_retry`` is spent hands
    the effect to a person, even where the participant deduplicates: it may have forgotten the
    key), then the same key again where the participant promises to deduplicate, and only then
    a person. A manual-intervention effect takes no re-dispatch on doubt.
    """
    if participant.lookup_function is not None:
        return RESOLVED_BY_LOOKUP
    if participant.deduplicates and classification is not Classification.MANUAL_INTERVENTION:
        return RESOLVED_BY_DEDUPE
    return RESOLVED_BY_OPERATOR


def describe_backoff(policy: RetryPolicy) -> str:
    return (
        f"{_duration(policy.backoff_initial)} x{policy.backoff_multiplier:g}, "
        f"at most {_duration(policy.backoff_max)}"
    )


def _duration(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def effect_report(declaration: EffectDeclaration) -> EffectReport:
    participant = declaration.participant
    return EffectReport(
        effect=f"{participant.name}.{declaration.operation}",
        participant=participant.name,
        operation=declaration.operation,
        classification=declaration.classification.value,
        # A compensation cannot be undone either, but it is no pivot: it only goes backward.
        pivot=declaration.classification.is_pivot and not declaration.is_compensation,
        deduplicates=participant.deduplicates,
        has_lookup=participant.lookup_function is not None,
        unknown_resolution=unknown_resolution(participant, declaration.classification),
        compensation=declaration.compensation or NO_COMPENSATION,
        attempts_max=declaration.retry.attempts_max,
        backoff=describe_backoff(declaration.retry),
        timeout_seconds=declaration.timeout_seconds,
        retry=declaration.retry.to_record(),
    )


def identities(definition: WorkflowDefinition) -> dict[str, str]:
    return {
        "tenant": f"{DEFAULT_TENANT} (unless the caller names another)",
        "business key": "the caller's handle for one outcome of workflow " + definition.name,
        "instance id": INSTANCE_ID_RULE,
        "run": "r1 at start; a new run only after an operator reset",
        "step": "s{seq}: the position in the instance's journal, the same on every replay",
        "idempotency key": idempotency_key_pattern(),
        "attempt": "recorded with each dispatch, never part of the key",
        "compensation key": f"{compensation_key(IdempotencyKey(''))}<original idempotency key>",
    }


def effect_warnings(effect: EffectReport) -> list[str]:
    """What an operator should know before trusting this effect under faults."""
    found: list[str] = []
    undoable = {Classification.COMPENSATABLE.value, Classification.REVERSIBLE.value}
    if effect.classification in undoable and effect.compensation == NO_COMPENSATION:
        found.append(
            f"{effect.effect} is {effect.classification} but declares no compensation: "
            "nothing can undo it if the workflow fails after it"
        )
    if effect.unknown_resolution == RESOLVED_BY_OPERATOR:
        found.append(
            f"{effect.effect}: an UNKNOWN outcome can only be resolved by an operator "
            f"({effect.participant} has no lookup and does not deduplicate), so every lost "
            "reply or timeout parks the instance in MANUAL_INTERVENTION"
        )
    return found


def _declaration(registry: Registry, item: Item) -> EffectDeclaration | None:
    participant_name, _, operation = item.name.partition(".")
    participant = registry.participants.get(participant_name)
    return participant.effects.get(operation) if participant is not None else None


def coverage_report(summaries: Iterable[Summary]) -> CoverageReport | None:
    merged = Coverage()
    for summary in summaries:
        merged.merge(summary.coverage)
    if merged.runs == 0:
        return None
    return CoverageReport(
        runs=merged.runs,
        runs_non_terminal=merged.runs_non_terminal,
        instances_non_terminal=merged.instances_non_terminal,
        items=merged.rows(),
        unreached=[str(item) for item in merged.unreached()],
        non_vacuity=round(merged.non_vacuity, 4),
        effects=sum(1 for row in merged.rows() if ItemKind(row.kind) in EFFECT_KINDS),
        defaulted_events=sorted(merged.defaulted),
    )


def coverage_warnings(coverage: CoverageReport) -> list[str]:
    """An item no run reached, by name; runs that ended with work still waiting."""
    found = []
    for row in coverage.items:
        if row.reached:
            continue
        why = (
            "the workflow's code names it"
            if row.origin == FROM_CODE
            else f"the workflow reaches participant {row.name.partition('.')[0]}"
        )
        found.append(
            f"never reached: {row.kind} {row.name} was reached by 0 of {coverage.runs} runs "
            f"({why}); nothing about it was explored"
        )
    if coverage.runs_non_terminal:
        found.append(
            f"{coverage.runs_non_terminal} of {coverage.runs} runs ended with "
            f"{coverage.instances_non_terminal} instance(s) not terminal (WAITING with nothing "
            "left to deliver): what comes after was not explored in them"
        )
    return found


def build_report(
    registry: Registry,
    definition: WorkflowDefinition,
    *,
    summaries: Iterable[Summary] = (),
) -> ConsistencyReport:
    """The report for ``definition``: the workflow's own effects (those its runs reached or
    may reach, see the module docstring), the figures of each summary and their coverage."""
    summaries = list(summaries)
    coverage = coverage_report(summaries)
    items = [Item(ItemKind(row.kind), row.name) for row in coverage.items] if coverage else []
    items += [item for item in declared([definition]) if item not in items]
    found = [_declaration(registry, item) for item in items if item.kind in EFFECT_KINDS]
    effects = [effect_report(declaration) for declaration in found if declaration is not None]
    warnings = [w for effect in effects for w in effect_warnings(effect)]
    if coverage is not None:
        warnings += coverage_warnings(coverage)
    unexplored = max((summary.paths_unexplored for summary in summaries), default=0)
    if unexplored:
        warnings.append(
            f"at least {unexplored} path(s) through the waits were not swept: past "
            f"{limits.EXPLORER_PATHS_MAX} paths the rest are left out"
        )
    newest = registry.get(definition.name).version
    if newest != definition.version:
        # scenario_for starts instances by workflow name, which pins them to the newest version.
        warnings.append(
            f"this report describes {definition.name} v{definition.version}, but new instances "
            f"(and the explorer's) start under the newest version, v{newest}"
        )
    policy = definition.step_retry
    return ConsistencyReport(
        workflow=definition.name,
        version=definition.version,
        fingerprint=definition.fingerprint,
        newest_version=newest,
        identities=identities(definition),
        effects=effects,
        step_retry={
            "attempts_max": policy.attempts_max,
            "backoff": describe_backoff(policy),
            "retry_on": list(policy.retry_on) or ["every error"],
        },
        lease_seconds_default=limits.LEASE_SECONDS_DEFAULT,
        owners=OWNERS,
        pinning=PINNING,
        warnings=warnings,
        figures=[summary.figures() for summary in summaries],
        business_failures=business_failures(definition),
        defects=defects(definition),
        coverage=coverage,
    )


def business_failures(definition: WorkflowDefinition) -> list[str]:
    """The exceptions that end the instance as the workflow's declared failure (they
    compensate, or fail it when nothing is confirmed)."""
    if definition.on_defect is OnDefect.COMPENSATE:
        return ["every exception (on_defect='compensate')"]
    return [
        "ledgerflow.BusinessFailure and its subclasses",
        "the engine's step errors raised into the code: EffectFailedError, WaitTimeoutError, "
        "and StepFailedError when the local step's own exception is a business failure",
        *(f"declared: {name}" for name in declared_names(definition.business_failures)),
    ]


def defects(definition: WorkflowDefinition) -> str:
    """What any other exception from the workflow's code does."""
    if definition.on_defect is OnDefect.COMPENSATE:
        return "none: every exception is treated as a business failure"
    policy = definition.defect_retry
    return (
        f"any other exception is a defect: tried {policy.attempts_max} times in all "
        f"({describe_backoff(policy)}), then parked {WORKFLOW_DEFECT} with its traceback and "
        "the code fingerprint; nothing is compensated"
    )


def faults_in_order(result: RunResult) -> list[str]:
    """The injected faults of a run in the order they hit (a run lists crashes, then errors)."""
    position = {hit: n for n, hit in enumerate(result.hits)}
    return sorted(result.fired, key=lambda fired: position.get(fired, len(position)))


def failure_trace(result: RunResult, *, lines_max: int = TRACE_LINES_MAX) -> list[str]:
    """The fault point hits of a failing run up to its last injected fault, faults marked.

    Long traces keep every injected fault and the hits just before the last one (where the
    run went wrong); the hits left out are counted in a gap line, so no gap is silent.
    """
    fired = set(result.fired)
    positions = {n for n, hit in enumerate(result.hits) if hit in fired}
    end = max(positions) + 1 if positions else len(result.hits)
    kept = positions | set(range(max(0, end - lines_max), end))
    lines: list[str] = []
    skipped = 0
    for n, hit in enumerate(result.hits[:end]):
        if n not in kept:
            skipped += 1
            continue
        if skipped:
            lines.append(f"... {skipped} hit(s) not shown")
            skipped = 0
        lines.append(f"{hit}  <- fault injected" if n in positions else hit)
    return lines
