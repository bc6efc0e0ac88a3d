"""The public front doors are pinned: changing them is a deliberate edit of the lists below.

``ledgerflow`` and ``ledgerflow.participant`` are pinned by their ``__all__``;
``ledgerflow.errors`` (which has no ``__all__``) by its set of public error classes. Each error
also keeps the promises of docs/style.md point 7: a unique stable code ``LFnnn``, a
docstring, a place in the tree drawn in the module docstring, and a section in
``docs/errors.md``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import ledgerflow
import ledgerflow.errors
import ledgerflow.participant
import ledgerflow.testing
from ledgerflow.errors import LedgerflowError

DOCS = Path(__file__).resolve().parent.parent / "docs"

LEDGERFLOW_ALL = [
    "BusinessFailure",
    "ChildHandle",
    "Classification",
    "Codec",
    "Delivered",
    "Delivery",
    "DeliveryOutcome",
    "EffectCall",
    "EffectLimit",
    "EffectRecord",
    "EffectState",
    "Engine",
    "Example",
    "InstanceDetail",
    "InstanceRecord",
    "InstanceStatus",
    "JsonCodec",
    "LookupAnswer",
    "Metrics",
    "NatsRelay",
    "NotPublished",
    "Participant",
    "Published",
    "RabbitMQRelay",
    "Registry",
    "RetryPolicy",
    "RunRecord",
    "Signal",
    "SignalStarted",
    "Started",
    "StepRecord",
    "StepStatus",
    "SyncEngine",
    "TimelineEntry",
    "UpdateStarted",
    "Worker",
    "WorkflowContext",
]

PARTICIPANT_ALL = [
    "Applied",
    "Classification",
    "EffectCall",
    "EffectDeclaration",
    "EffectRejectedError",
    "HeartbeatAnswer",
    "Kit",
    "KitRequest",
    "LookupAnswer",
    "LookupVerdict",
    "NatsParticipant",
    "NatsRoute",
    "Participant",
    "Precondition",
    "PreconditionVerdict",
    "RabbitMQParticipant",
    "RabbitMQRoute",
    "Refused",
    "RetryPolicy",
    "declare_streams",
    "declare_topology",
    "handle_message",
    "kit_app",
    "kit_routes",
    "nats_participant",
    "rabbitmq_participant",
    "remote_participant",
]

TESTING_ALL = [
    "Behavior",
    "ConsistencyReport",
    "Explorer",
    "FakeClock",
    "FaultPlan",
    "FaultRule",
    "Rates",
    "ReplayVerdict",
    "RunResult",
    "Scenario",
    "ScriptedParticipant",
    "SeedBank",
    "SimulatedCrash",
    "StartSpec",
    "Summary",
    "Violation",
    "World",
    "build_report",
    "replay_histories",
    "replay_history",
    "scenario_for",
]

ERRORS = [
    "ApiUnreachableError",
    "ArrivalsError",
    "AttemptSupersededError",
    "BusinessFailure",
    "CancelArrivedError",
    "ChildCancelledError",
    "ChildCompensatedError",
    "ChildFailedError",
    "ChildForwardRecoveryRequiredError",
    "ChildKeyConflictError",
    "ChildNeedsInterventionError",
    "ChildWorkflowError",
    "CommandLineError",
    "ConcurrencyError",
    "ConfigurationError",
    "EffectFailedError",
    "EffectRejectedError",
    "EventArrivedError",
    "EventRefusedError",
    "FencedOutError",
    "ForeignConnectionError",
    "ForeignDatabaseError",
    "HostNotAllowedError",
    "IdempotencyKeyReusedError",
    "IllegalTransitionError",
    "InboxFullError",
    "InstanceNotFoundError",
    "InvalidCursorError",
    "KeyInUseError",
    "LedgerflowError",
    "LockDeadlockError",
    "LockTimeoutError",
    "MethodNotAllowedError",
    "MissingExtraError",
    "NoCapableWorkerError",
    "NoTransactionError",
    "NotAuthenticatedError",
    "NotAuthorizedError",
    "NotCommittedError",
    "OperatorError",
    "ParticipantUnreachableError",
    "PayloadError",
    "PayloadTooLargeError",
    "RegistrationError",
    "RepairRefusedError",
    "RequestError",
    "RequestTimeoutError",
    "ReservedNameError",
    "ResultTimeoutError",
    "RetryTransactionError",
    "RouteNotFoundError",
    "ScheduleNotFoundError",
    "SchemaVersionError",
    "ServerBusyError",
    "SlotTakenError",
    "StalePreconditionError",
    "StepError",
    "StepFailedError",
    "StorageAccessError",
    "StorageCorruptError",
    "StorageError",
    "StorageUnavailableError",
    "StoreNotFoundError",
    "TargetNotFoundError",
    "TokenNameTakenError",
    "UnknownVersionError",
    "UnknownWorkflowError",
    "UnsettledEffectsError",
    "UnsupportedMediaTypeError",
    "UpdateRejectedError",
    "VersionRetiredError",
    "WaitChildrenLiveError",
    "WaitTimeoutError",
    "WorkflowError",
]


def _error_classes() -> dict[str, type[LedgerflowError]]:
    return {
        name: value
        for name, value in vars(ledgerflow.errors).items()
        if not name.startswith("_")
        and inspect.isclass(value)
        and issubclass(value, LedgerflowError)
    }


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (ledgerflow, LEDGERFLOW_ALL),
        (ledgerflow.participant, PARTICIPANT_ALL),
        (ledgerflow.testing, TESTING_ALL),
    ],
    ids=["ledgerflow", "ledgerflow.participant", "ledgerflow.testing"],
)
def test_all_is_pinned(module: ModuleType, expected: list[str]) -> None:
    """Goal: the public API changes only by a deliberate edit of this file.

    Method: compare the sorted ``__all__`` with the checked-in list; every name resolves and
    none is listed twice.
    """
    exported: list[str] = module.__all__
    assert sorted(exported) == expected
    assert len(set(exported)) == len(exported)
    for name in exported:
        assert getattr(module, name) is not None


def test_public_names_are_documented() -> None:
    """Goal: every public class or function says what it is for.

    Method: each name exported by the two front doors has a non-empty docstring of its own.
    """
    for module in (ledgerflow, ledgerflow.participant):
        for name in module.__all__:
            value = getattr(module, name)
            assert (inspect.getdoc(value) or "").strip(), f"{module.__name__}.{name}"


def test_errors_are_pinned() -> None:
    """Goal: the catchable error classes change only deliberately.

    Method: the public LedgerflowError subclasses of ``ledgerflow.errors`` (and its ``__all__``
    if it ever gets one) equal the checked-in list.
    """
    assert sorted(_error_classes()) == ERRORS
    if hasattr(ledgerflow.errors, "__all__"):
        assert sorted(ledgerflow.errors.__all__) == ERRORS


def test_error_codes_are_unique_stable_and_documented_in_code() -> None:
    """Goal: each error has its own stable code and a docstring saying what it means.

    Method: codes match ``LFnnn`` and are pairwise distinct; each class defines its own code
    (none inherits its parent's) and its own docstring.
    """
    classes = _error_classes()
    codes = [cls.code for cls in classes.values()]
    assert all(re.fullmatch(r"LF\d{3}", code) for code in codes), codes
    assert len(set(codes)) == len(codes)
    for name, cls in classes.items():
        assert "code" in vars(cls), f"{name} inherits its code"
        assert (cls.__doc__ or "").strip(), f"{name} has no docstring"


def test_errors_module_draws_every_error_in_its_tree() -> None:
    """Goal: the tree in the errors module's docstring is the real hierarchy.

    Method: parse the tree lines (the depth is the column of the name, four per level); each
    drawn class's parent is the nearest class drawn one level up; every class is mentioned in
    the docstring.
    """
    doc = ledgerflow.errors.__doc__ or ""
    classes = _error_classes()
    parents: list[str] = []
    drawn = 0
    for line in doc.splitlines():
        match = re.match(r"^(\s*)((?:[│├└─ ]*)?)([A-Z]\w+(?:Error|Failure))\b", line)
        if match is None or match.group(3) not in classes or not line.startswith("    "):
            continue
        depth = (len(match.group(1)) + len(match.group(2)) - 4) // 4
        del parents[depth:]
        if parents:
            assert classes[match.group(3)].__bases__ == (classes[parents[-1]],), line
        parents.append(match.group(3))
        drawn += 1
    assert drawn >= len(classes) - 1
    for name in classes:
        assert name in doc, f"{name} is missing from the errors module docstring"


def _error_headings() -> dict[str, str]:
    """``## LFnnn`` headings of docs/errors.md -> the text of their section."""
    text = (DOCS / "errors.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {s.splitlines()[0].strip(): s for s in sections}


def test_every_error_code_has_a_section_in_docs() -> None:
    """Goal: docs/errors.md explains every code (anchor = the code) and nothing else.

    Method: the ``## `` headings are exactly the set of codes; each section names its class and
    says what to do.
    """
    headings = _error_headings()
    classes = _error_classes()
    assert set(headings) == {cls.code for cls in classes.values()}
    for name, cls in classes.items():
        section = headings[cls.code]
        assert f"`{name}`" in section, f"{cls.code} does not name {name}"
        assert "What to do" in section, f"{cls.code} does not say what to do"


def test_internal_modules_say_they_are_internal() -> None:
    """Goal: everything outside the front doors says in its docstring that it is internal.

    Method: import the storage and model packages' modules and look for "internal" in their
    package docstrings (docs/style.md point 2).
    """
    for name in ("ledgerflow.model", "ledgerflow.storage"):
        module = importlib.import_module(name)
        assert "internal" in (module.__doc__ or "").lower(), name


def test_the_tree_in_docs_is_the_hierarchy_with_its_codes() -> None:
    """Goal: the tree drawn at the top of docs/errors.md is the real hierarchy (it once lacked
    LF302 and LF503), each class with its own code.

    Method: parse the tree's lines (depth = column of the name, four per level); each class's
    parent is the nearest class one level up, its code is the one beside it, and every class
    is drawn exactly once.
    """
    text = (DOCS / "errors.md").read_text()
    tree = text.split("```", 2)[1]
    classes = _error_classes()
    parents: list[str] = []
    drawn: list[str] = []
    for line in tree.splitlines():
        match = re.match(r"^([│├└─ ]*)([A-Z]\w+(?:Error|Failure))\s+(LF\d{3})$", line)
        if match is None:
            continue
        depth = len(match.group(1)) // 4
        name, code = match.group(2), match.group(3)
        del parents[depth:]
        if parents:
            assert classes[name].__bases__ == (classes[parents[-1]],), line
        assert classes[name].code == code, line
        parents.append(name)
        drawn.append(name)
    assert sorted(drawn) == sorted(classes)


def test_errors_declare_their_identities_as_attributes() -> None:
    """Goal: each error carries the ids it names as typed attributes, declared on its class,
    and says in docs/errors.md which ones it adds to its parent's.

    Method: every class built with no arguments has each of its ``ID_NAMES`` as an attribute
    (``None``: not known) and an ``ids`` of the known ones only; every name a class adds to its
    parent's ``ID_NAMES`` is written in backticks in the class's section of docs/errors.md.
    """
    headings = _error_headings()
    for name, cls in _error_classes().items():
        error = cls()
        for attribute in cls.ID_NAMES:
            assert hasattr(error, attribute), f"{name} does not set {attribute}"
        assert set(error.ids) <= set(cls.ID_NAMES), name
        parent = cls.__bases__[0]
        inherited = getattr(parent, "ID_NAMES", ())
        for attribute in set(cls.ID_NAMES) - set(inherited):
            assert f"`{attribute}`" in headings[cls.code], f"{cls.code} does not name {attribute}"


def test_an_error_names_its_known_identities_after_its_message() -> None:
    """Goal: the ids are part of the text, in their declared order, unknown ones left out.

    Method: a FencedOutError with both ids, and an IllegalTransitionError with some.
    """
    fenced = ledgerflow.errors.FencedOutError("refused", instance_id="wf_1", generation=3)
    assert str(fenced) == "[LF301] refused (instance_id=wf_1, generation=3)"
    assert (fenced.instance_id, fenced.generation) == ("wf_1", 3)
    illegal = ledgerflow.errors.IllegalTransitionError("no", machine="step", effect_id="e1")
    assert str(illegal) == "[LF310] no (machine=step, effect_id=e1)"
    assert illegal.ids == {"machine": "step", "effect_id": "e1"}
