"""Declarations: participants, their effects, workflows, and the registry that holds them.

Declarations are checked when they are made (an effect without a classification is refused
there, not at run time) and each workflow definition gets a fingerprint of its code, state
schema and configuration, to which every instance is pinned at start.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import textwrap
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from ledgerflow import limits
from ledgerflow.errors import RegistrationError, UnknownVersionError, UnknownWorkflowError
from ledgerflow.model import arguments
from ledgerflow.model import flow as flows
from ledgerflow.model.classification import Classification
from ledgerflow.model.compensation import Precondition
from ledgerflow.model.defects import OnDefect, declared_names, is_business_failure
from ledgerflow.model.effect import LookupAnswer
from ledgerflow.model.effect_call import EffectCall as EffectCall
from ledgerflow.model.flow_order import PRIORITY_DEFAULT
from ledgerflow.model.heartbeat import checked_heartbeat_timeout
from ledgerflow.model.ids import IdempotencyKey
from ledgerflow.model.retry import (
    DEFAULT_DEFECT_RETRY,
    DEFAULT_EFFECT_RETRY,
    DEFAULT_LOOKUP_RETRY,
    DEFAULT_STEP_RETRY,
    RetryPolicy,
)
from ledgerflow.model.routing import OnNewCode, Served
from ledgerflow.model.schedule import ScheduleDeclarations, ScheduleSpec
from ledgerflow.model.updates import UpdateDeclarations, Validator

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str):
        raise RegistrationError(
            f"a {kind} name is a string, e.g. 'payments', not {arguments.kind_of(name)}"
        )
    if not _NAME.match(name) or len(name) > limits.NAME_LENGTH_MAX:
        raise RegistrationError(
            f"{kind} name {name!r} must start with a letter or '_' and hold only letters, "
            f"digits, '_', '.', '-' (at most {limits.NAME_LENGTH_MAX} characters)"
        )
    return name


EffectFunction = Callable[[EffectCall], Awaitable[Any]] | Callable[[EffectCall], Any]
PreconditionFunction = (
    Callable[[EffectCall], Awaitable[Precondition]] | Callable[[EffectCall], Precondition]
)
# A lookup receives the key and the highest attempt that may have been dispatched under it.
LookupFunction = (
    Callable[[IdempotencyKey, int], Awaitable[LookupAnswer]]
    | Callable[[IdempotencyKey, int], LookupAnswer]
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectDeclaration:
    """One operation of a participant, with its classification and retry policy."""

    participant: Participant
    operation: str
    classification: Classification
    function: EffectFunction
    retry: RetryPolicy
    timeout_seconds: float
    compensation: str | None
    # A compensating operation (declared with Participant.compensation), and its precondition.
    is_compensation: bool = False
    precondition: PreconditionFunction | None = None
    # An asynchronous effect: seconds to wait for the participant's completion callback.
    completes_by_callback: float | None = None
    # The participant contract (payload shape) version this declaration speaks, recorded with
    # every effect it writes; None: not declared.
    contract_version: str | None = None
    # Seconds an attempt may go without a heartbeat (call.heartbeat) before it is cut off and
    # its outcome is UNKNOWN; None: no heartbeat is asked for (checked as it is declared).
    heartbeat_timeout_seconds: float | None = None
    priority: int = PRIORITY_DEFAULT  # a call's flow-control priority, unless it gives one
    limit: flows.FlowLimit | None = None

    def __post_init__(self) -> None:
        what = f"effect {self.participant.name}.{self.operation}"
        object.__setattr__(self, "priority", flows.declared_priority(self.priority, what=what))
        seconds = checked_heartbeat_timeout(
            self.heartbeat_timeout_seconds, self.function, what=what, timeout=self.timeout_seconds
        )
        object.__setattr__(self, "heartbeat_timeout_seconds", seconds)

    def describe(self) -> dict[str, Any]:
        """The declaration as a JSON record: participant, operation, classification, retry policy,
        timeout, compensation, deduplication, lookup and contract version (and the heartbeat
        timeout, when one is declared)."""
        described = {
            "participant": self.participant.name,
            "operation": self.operation,
            "classification": self.classification.value,
            "retry": self.retry.to_record(),
            "timeout_seconds": self.timeout_seconds,
            "compensation": self.compensation,
            "deduplicates": self.participant.deduplicates,
            "has_lookup": self.participant.lookup_function is not None,
            "contract_version": self.contract_version,
        }
        if self.heartbeat_timeout_seconds is not None:
            described["heartbeat_timeout_seconds"] = self.heartbeat_timeout_seconds
        return described


class Participant:
    """An independently committed service the workflows change, and how to ask it about a key.

    Example::

        payments = Participant("payments", deduplicates=True)

        @payments.effect(classification="compensatable")
        async def charge(call: EffectCall) -> dict:
            return await bank.charge(call.payload, idempotency_key=call.idempotency_key)

        @payments.lookup
        async def find(key: str, attempt: int) -> LookupAnswer:
            ...

    ``deduplicates=True`` promises that the same idempotency key applied twice is applied once.
    A lookup answers, for a key, applied (with evidence), not applied, or unknown. Answering
    not applied is a promise: no dispatch of that key with an attempt number up to ``attempt``
    will ever be applied (the participant fences them), so a late original request cannot
    apply after the engine re-dispatches with a higher attempt number. A lookup that raises
    (the participant is unreachable) is no answer: it is asked again on ``lookup_retry``, and
    only when that is spent is the doubt settled without it (or handed to a person).

    ``key_retention`` states how long the participant remembers a key (its deduplication and
    lookup window); ``ledgerflow check-participant`` holds it to the engine's retry horizon.

    ``@payments.effect(..., heartbeat_timeout=seconds)`` asks a long effect to call ``await
    call.heartbeat(details)`` at least that often; an attempt that misses it is cut off, its
    outcome UNKNOWN and settled by the lookup, and the next attempt reads
    ``call.last_heartbeat`` (see :mod:`ledgerflow.model.heartbeat`).
    """

    def __init__(
        self,
        name: str,
        *,
        deduplicates: bool = False,
        lookup_retry: RetryPolicy = DEFAULT_LOOKUP_RETRY,
        key_retention: timedelta | None = None,
    ) -> None:
        self.name = check_name("participant", name)
        what = f"participant {name}"
        self.key_retention = arguments.duration(key_retention, what=what, option="key_retention")
        self.deduplicates = arguments.flag(deduplicates, what=what, option="deduplicates")
        self.lookup_retry = arguments.retry_policy(lookup_retry, what=what, option="lookup_retry")
        self.lookup_function: LookupFunction | None = None
        self.effects: dict[str, EffectDeclaration] = {}

    def __repr__(self) -> str:
        return f"Participant({self.name!r}, deduplicates={self.deduplicates})"

    def effect(
        self,
        operation: str | None = None,
        *,
        classification: Classification | str | None = None,
        retry: RetryPolicy = DEFAULT_EFFECT_RETRY,
        timeout_seconds: float = limits.EFFECT_TIMEOUT_SECONDS_DEFAULT,
        compensation: str | None = None,
        completes_by_callback: float | None = None,
        contract_version: int | str | None = None,
        heartbeat_timeout: float | None = None,
        priority: int = PRIORITY_DEFAULT,
        limit: flows.EffectLimit | None = None,
    ) -> Callable[[EffectFunction], EffectDeclaration]:
        """Declare an effect. ``classification`` is required: there is no safe default.

        ``contract_version`` names the version of the participant's contract (the shape of the
        payload it takes) this declaration speaks; it is recorded with every effect, so that a
        replay can tell histories written under another contract (see
        :func:`~ledgerflow.model.contracts.contract_mismatches`).

        ``completes_by_callback=seconds`` declares an asynchronous effect: the participant's
        answer to the dispatch only says it accepted the request; the effect completes when
        the participant calls back (``Engine.complete_effect``), and with no callback within
        that many seconds its outcome is UNKNOWN and settled like any other."""
        if operation is not None and not isinstance(operation, str):
            # `@payments.effect` without parentheses hands the function over as `operation`.
            raise RegistrationError(
                f"@{self.name}.effect is called with its options, e.g. "
                f"@{self.name}.effect(classification='compensatable'), and takes an optional "
                f"operation name as a string, not {arguments.kind_of(operation)}"
            )

        def register(function: EffectFunction) -> EffectDeclaration:
            op = check_name("operation", operation or function.__name__)
            what = f"effect {self.name}.{op}"
            kind = arguments.classification(classification, what)
            if op in self.effects:
                raise RegistrationError(f"{what} is declared twice")
            self.effects[op] = declaration = EffectDeclaration(
                participant=self,
                operation=op,
                classification=kind,
                function=function,
                retry=arguments.retry_policy(retry, what=what),
                timeout_seconds=_timeout(timeout_seconds, what),
                compensation=arguments.compensation_name(compensation, effect=f"{self.name}.{op}"),
                completes_by_callback=arguments.seconds(
                    completes_by_callback, what=what, option="completes_by_callback", optional=True
                ),
                contract_version=contract_text(f"effect {self.name}.{op}", contract_version),
                heartbeat_timeout_seconds=heartbeat_timeout, priority=priority,
                limit=flows.declared_limit(limit, scope=flows.effect_scope(self.name, op)),
            )  # fmt: skip
            return declaration

        return register

    def compensation(
        self,
        operation: str,
        *,
        retry: RetryPolicy = DEFAULT_EFFECT_RETRY,
        timeout_seconds: float = limits.EFFECT_TIMEOUT_SECONDS_DEFAULT,
        precondition: PreconditionFunction | None = None,
    ) -> Callable[[EffectFunction], EffectDeclaration]:
        """Declare a compensating operation, named by the effects it undoes.

        It receives the original effect's payload, key and evidence; its own key is
        ``compensate:`` + the original key. A compensation cannot itself be undone, so it is
        classified forward-recovery-only. ``precondition`` is asked first, against the
        participant's current state (see :class:`~ledgerflow.participant.Precondition`).
        """
        where = f"@{self.name}.compensation"
        op = check_name(
            "operation", arguments.operation_name(operation, where=where, example="refund")
        )
        what = f"compensation {self.name}.{op}"
        policy = arguments.retry_policy(retry, what=what)
        timeout = _timeout(timeout_seconds, what)
        check = arguments.function(precondition, what=what, option="precondition=")

        def register(function: EffectFunction) -> EffectDeclaration:
            if op in self.effects:
                raise RegistrationError(f"effect {self.name}.{op} is declared twice")
            declaration = EffectDeclaration(
                participant=self,
                operation=op,
                classification=Classification.FORWARD_RECOVERY_ONLY,
                function=function,
                retry=policy,
                timeout_seconds=timeout,
                compensation=None,
                is_compensation=True,
                precondition=check,
            )
            self.effects[op] = declaration
            return declaration

        return register

    def compensation_of(self, declaration: EffectDeclaration) -> EffectDeclaration:
        """The compensating declaration an effect names; a clear error if it is missing."""
        name = declaration.compensation
        found = self.effects.get(name) if name else None
        if found is None or not found.is_compensation:
            raise RegistrationError(
                f"effect {self.name}.{declaration.operation} names compensation {name!r}, "
                f"which is not declared with @{self.name}.compensation({name!r})"
            )
        return found

    def lookup(self, function: LookupFunction) -> LookupFunction:
        """Register the function that answers whether a key was applied."""
        arguments.function(function, what=f"@{self.name}.lookup", option="")
        self.lookup_function = function
        return function


def _timeout(value: object, what: str) -> float:
    timeout = arguments.seconds(value, what=what, option="timeout_seconds")
    assert timeout is not None  # not optional
    return timeout


def contract_text(what: str, version: int | str | None) -> str | None:
    """A declared contract version as recorded: a small integer or a short name, as text."""
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int | str):
        raise RegistrationError(f"{what}: contract_version must be an int or a str")
    text = str(version)
    if not text or len(text) > limits.CONTRACT_VERSION_LENGTH_MAX or text != text.strip():
        raise RegistrationError(
            f"{what}: contract_version must be 1 to {limits.CONTRACT_VERSION_LENGTH_MAX} "
            "characters without surrounding spaces"
        )
    return text


WorkflowFunction = Callable[..., Awaitable[Any]]


Choice = TypeVar("Choice", OnDefect, OnNewCode)


def _checked_choice(workflow: str, option: str, kind: type[Choice], value: Choice | str) -> Choice:
    """A declared option's value as its enum: the member, or its value's text."""
    try:
        return kind(value)
    except ValueError:
        raise RegistrationError(
            f"workflow {workflow}: {option} must be one of "
            + ", ".join(repr(o.value) for o in kind)
        ) from None


def _defect_settings(
    failures: tuple[type[BaseException], ...], on_defect: OnDefect, defect_retry: RetryPolicy
) -> dict[str, Any]:
    """What a workflow declares about its failures, as its fingerprint's configuration.
    Recorded only when declared: the fingerprints of definitions that declare none stay what
    they were before business failures and defects were told apart."""
    settings: dict[str, Any] = {}
    if failures:
        settings["business_failures"] = declared_names(failures)
    if on_defect is not OnDefect.PARK:
        settings["on_defect"] = on_defect.value
    if defect_retry != DEFAULT_DEFECT_RETRY:
        settings["defect_retry"] = defect_retry.to_record()
    return settings


def _checked_failures(
    workflow: str, declared: tuple[type[BaseException], ...] | list[type[BaseException]]
) -> tuple[type[BaseException], ...]:
    given: Any = declared  # checked, not trusted: a caller may pass one class, unlisted
    if not isinstance(given, tuple | list):
        raise RegistrationError(
            f"workflow {workflow}: business_failures= takes a list of exception classes, e.g. "
            f"business_failures=[OutOfStock], not {arguments.kind_of(given)}"
        )
    return tuple(arguments.exception_class(kind, workflow=workflow) for kind in given)


def _check_workflow_options(
    name: str, version: int, *, step_retry: object, defect_retry: object, config: object
) -> None:
    """The arguments of ``Registry.workflow`` that need no function: each wrong kind says what
    to pass instead."""
    check_name("workflow", name)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RegistrationError(
            f"workflow {name}: version= takes a positive integer, e.g. version=1, not "
            f"{arguments.kind_of(version)}"
        )
    what = f"workflow {name}"
    arguments.retry_policy(step_retry, what=what, option="step_retry")
    arguments.retry_policy(defect_retry, what=what, option="defect_retry")
    if config is not None and not isinstance(config, dict):
        raise RegistrationError(
            f"{what}: config= takes a dict of settings, not {arguments.kind_of(config)}"
        )


def fingerprint_of(
    function: WorkflowFunction, *, name: str, version: int, schema: str, config: dict[str, Any]
) -> str:
    """A digest of what an instance depends on: code, state schema and configuration.

    The code part is the function's syntax tree, so comments and formatting do not count but
    any change of behaviour does.
    """
    try:
        source = textwrap.dedent(inspect.getsource(function))
        code = ast.dump(ast.parse(source), include_attributes=False)
    except (OSError, TypeError, SyntaxError):
        code = function.__code__.co_code.hex()
    material = json.dumps(
        {"name": name, "version": version, "code": code, "schema": schema, "config": config},
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowDefinition:
    name: str
    version: int
    function: WorkflowFunction
    fingerprint: str
    step_retry: RetryPolicy
    schema: str
    config: dict[str, Any] = field(default_factory=dict)
    # Sample inputs, for `ledgerflow verify` and documentation; not part of the fingerprint.
    examples: tuple[Any, ...] = ()
    # The exception types this workflow raises on purpose (beyond BusinessFailure): they
    # compensate or fail the instance; any other exception is a defect (model/defects.py).
    business_failures: tuple[type[BaseException], ...] = ()
    on_defect: OnDefect = OnDefect.PARK
    # How often, and after what backoff, a defect is tried again before the instance parks.
    defect_retry: RetryPolicy = DEFAULT_DEFECT_RETRY
    # What this code does with instances of its version pinned to code nobody serves any more
    # (model/routing.py); not part of the fingerprint: it decides a deploy, not a run.
    on_new_code: OnNewCode = OnNewCode.ADOPT_IF_REPLAY_CLEAN

    def is_business_failure(self, exc: BaseException) -> bool:
        """Whether ``exc`` from this workflow's code compensates or fails the instance (a
        business failure, or any exception under ``on_defect="compensate"``) rather than
        being a defect, tried again and then parked."""
        return self.on_defect is OnDefect.COMPENSATE or is_business_failure(
            exc, self.business_failures
        )


class Registry(ScheduleDeclarations, UpdateDeclarations, flows.LimitDeclarations):
    """The workflows, participants and schedules a process knows; what ``ledgerflow worker``
    loads.

    Example::

        registry = Registry()

        @registry.workflow(name="order", version=1)
        async def order(ctx: WorkflowContext, order: dict) -> dict:
            ...
    """

    def __init__(self) -> None:
        self._workflows: dict[str, dict[int, WorkflowDefinition]] = {}
        self.participants: dict[str, Participant] = {}
        self.schedules: dict[str, ScheduleSpec] = {}
        self.update_validators: dict[tuple[str, str], Validator] = {}
        self.limits_declared: dict[str, flows.FlowLimit] = {}

    def add_participant(self, participant: Participant) -> Participant:
        """Add a participant the workflows of this registry change; return it."""
        if not isinstance(participant, Participant):
            raise RegistrationError(
                "add_participant takes a Participant, e.g. "
                "registry.add_participant(lf.Participant('payments')), not "
                f"{arguments.kind_of(participant)}"
            )
        known = self.participants.get(participant.name)
        if known is not None and known is not participant:
            raise RegistrationError(f"another participant is already named {participant.name!r}")
        self.participants[participant.name] = participant
        return participant

    def workflow(
        self,
        *,
        name: str,
        version: int,
        schema: str = "",
        config: dict[str, Any] | None = None,
        step_retry: RetryPolicy = DEFAULT_STEP_RETRY,
        examples: tuple[Any, ...] | list[Any] = (),
        business_failures: tuple[type[BaseException], ...] | list[type[BaseException]] = (),
        on_defect: OnDefect | str = OnDefect.PARK,
        defect_retry: RetryPolicy = DEFAULT_DEFECT_RETRY,
        on_new_code: OnNewCode | str = OnNewCode.ADOPT_IF_REPLAY_CLEAN,
    ) -> Callable[[WorkflowFunction], WorkflowFunction]:
        """Register an ``async def`` workflow under a name and a version.

        ``schema`` names the shape of the workflow's input and state (bump it when that shape
        changes); ``config`` is any settings the workflow's behaviour depends on. Both enter
        the fingerprint. ``examples`` are sample inputs that ``ledgerflow verify`` explores.

        ``business_failures`` lists the exception types the workflow raises on purpose (besides
        :class:`~ledgerflow.errors.BusinessFailure` and its subclasses): they compensate or
        fail the instance. Any other exception is a defect: tried again on ``defect_retry``,
        then parked ``workflow_defect`` with nothing compensated; ``on_defect="compensate"``
        treats every exception as a business failure instead.

        ``on_new_code`` says what this code does with in-flight instances of the same version
        that are pinned to another fingerprint no live worker serves (a deploy changed the
        code): ``"adopt_if_replay_clean"`` (the default) replays each one's journal against
        this code and takes it over, audited, only if the replay is clean; ``"pinned"`` leaves
        them for an operator's ``ledgerflow versions upgrade``.
        """
        _check_workflow_options(
            name, version, step_retry=step_retry, defect_retry=defect_retry, config=config
        )
        failures = _checked_failures(name, business_failures)
        defects = _checked_choice(name, "on_defect", OnDefect, on_defect)
        adopting = _checked_choice(name, "on_new_code", OnNewCode, on_new_code)

        def register(function: WorkflowFunction) -> WorkflowFunction:
            if not inspect.iscoroutinefunction(function):
                raise RegistrationError(f"workflow {name} must be an async def")
            settings = dict(config or {})
            settings["step_retry"] = step_retry.to_record()
            settings.update(_defect_settings(failures, defects, defect_retry))
            definition = WorkflowDefinition(
                name=name,
                version=version,
                function=function,
                fingerprint=fingerprint_of(
                    function, name=name, version=version, schema=schema, config=settings
                ),
                step_retry=step_retry,
                schema=schema,
                config=settings,
                examples=tuple(examples),
                business_failures=failures,
                on_defect=defects,
                defect_retry=defect_retry,
                on_new_code=adopting,
            )
            versions = self._workflows.setdefault(name, {})
            if version in versions:
                raise RegistrationError(f"workflow {name} version {version} is registered twice")
            versions[version] = definition
            # Lets `ledgerflow verify module:function` find the registry and the definition.
            function.__dict__.setdefault("__ledgerflow__", []).append((self, name, version))
            return function

        return register

    def get(self, name: str, version: int | None = None) -> WorkflowDefinition:
        """The definition of workflow ``name`` at ``version`` (the newest when ``None``);
        UnknownWorkflowError or UnknownVersionError naming what is registered."""
        versions = self._workflows.get(name)
        if not versions:
            known = ", ".join(sorted(self._workflows)) or "none"
            raise UnknownWorkflowError(
                f"no workflow named {name!r} is registered (known: {known})", workflow=name
            )
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            raise UnknownVersionError(
                f"workflow {name!r} has no version {version} (registered: {sorted(versions)})",
                workflow=name,
                version=version,
            )
        return versions[version]

    def validate(self) -> None:
        """Check what can only be checked once everything is declared: every compensation an
        effect names exists on its participant."""
        for participant in self.participants.values():
            for declaration in participant.effects.values():
                if declaration.compensation is not None:
                    participant.compensation_of(declaration)

    def definitions(self) -> list[WorkflowDefinition]:
        """Every registered workflow definition, all versions."""
        return [d for versions in self._workflows.values() for d in versions.values()]

    def served(self) -> tuple[Served, ...]:
        """What a worker with this registry can run: every (workflow, version, fingerprint)
        registered. A worker claims only instances pinned to one of them."""
        return tuple(sorted(Served(d.name, d.version, d.fingerprint) for d in self.definitions()))

    def adopts(self) -> tuple[Served, ...]:
        """The definitions whose code adopts instances of their workflow and version pinned to
        another fingerprint no live worker serves (``on_new_code``), after a clean replay."""
        return tuple(
            sorted(
                Served(d.name, d.version, d.fingerprint)
                for d in self.definitions()
                if d.on_new_code is OnNewCode.ADOPT_IF_REPLAY_CLEAN
            )
        )

    def effect(self, participant: str, operation: str) -> EffectDeclaration:
        """The declaration of ``participant.operation``; RegistrationError when none is
        registered."""
        try:
            return self.participants[participant].effects[operation]
        except KeyError:
            raise RegistrationError(f"no effect {participant}.{operation} is registered") from None
