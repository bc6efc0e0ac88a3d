"""Declarations are checked when they are made: retry policies, participants, effects, workflows.

Also the small pure pieces every declaration relies on: the workflow fingerprint (code, not
formatting), the payload codec (JSON values only, bounded) and identity-derived keys.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ledgerflow import limits
from ledgerflow.errors import (
    ConfigurationError,
    EffectRejectedError,
    LedgerflowError,
    PayloadError,
    RegistrationError,
    UnknownVersionError,
    UnknownWorkflowError,
)
from ledgerflow.model.classification import Classification
from ledgerflow.model.codec import JSON
from ledgerflow.model.definition import EffectCall, Participant, Registry, WorkflowFunction
from ledgerflow.model.ids import (
    EffectId,
    IdempotencyKey,
    InstanceId,
    RunNumber,
    StepSeq,
    TenantId,
    command_id,
    compensation_key,
    effect_id,
    idempotency_key,
)
from ledgerflow.model.retry import RetryPolicy

MS = timedelta(milliseconds=1)


def _names(exc: BaseException) -> tuple[str, ...]:
    """What a retry policy is asked about an error: its class names, then its code if any."""
    names = tuple(c.__name__ for c in type(exc).__mro__ if c not in (object, BaseException))
    code = getattr(exc, "error_code", None)
    return (*names, code) if isinstance(code, str) else names


# -- retry policies --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"attempts_max": 0}, "attempts_max"),
        ({"attempts_max": -1}, "attempts_max"),
        ({"attempts_max": limits.ATTEMPTS_MAX + 1}, "attempts_max"),
        ({"backoff_multiplier": 0.99}, "backoff_multiplier"),
        ({"backoff_initial": 2 * MS, "backoff_max": MS}, "backoff"),
        ({"backoff_initial": -MS}, "backoff"),
    ],
)
def test_retry_policy_refuses_bad_settings(settings_: dict[str, Any], message: str) -> None:
    """Goal: an impossible or unbounded retry policy is refused when it is declared.

    Method: build a policy with one bad setting; expect ConfigurationError naming the setting.
    """
    with pytest.raises(ConfigurationError, match=message):
        RetryPolicy(**settings_)


def test_retry_policy_accepts_the_bounds() -> None:
    """Goal: the limits themselves are valid settings (the bounds are inclusive).

    Method: build policies at attempts 1 and ATTEMPTS_MAX, multiplier 1 and initial == max.
    """
    RetryPolicy(attempts_max=1)
    RetryPolicy(attempts_max=limits.ATTEMPTS_MAX)
    RetryPolicy(backoff_multiplier=1.0, backoff_initial=MS, backoff_max=MS)


def test_delay_before_grows_then_is_capped() -> None:
    """Goal: backoff grows geometrically from the first retry and never passes its cap.

    Method: with 100 ms x2 capped at 1 s and jitter off, read the delay before attempts 1..7.
    """
    policy = RetryPolicy(
        attempts_max=10,
        backoff_initial=100 * MS,
        backoff_multiplier=2.0,
        backoff_max=timedelta(seconds=1),
        jitter=False,
    )
    delays = [policy.delay_before(attempt, identity="k") for attempt in range(1, 8)]
    assert delays == [
        timedelta(0),
        100 * MS,
        200 * MS,
        400 * MS,
        800 * MS,
        timedelta(seconds=1),
        timedelta(seconds=1),
    ]


policies = st.builds(
    RetryPolicy,
    attempts_max=st.integers(1, limits.ATTEMPTS_MAX),
    backoff_initial=st.integers(0, 60_000_000).map(lambda us: timedelta(microseconds=us)),
    backoff_multiplier=st.floats(1.0, 100.0, allow_nan=False),
    backoff_max=st.integers(60_000_000, 3_600_000_000).map(lambda us: timedelta(microseconds=us)),
    retry_on=st.lists(st.sampled_from(["TimeoutError", "busy", "OSError"]), max_size=3).map(tuple),
    jitter=st.booleans(),
)


@settings(derandomize=True, database=None)
@given(policy=policies)
@example(policy=RetryPolicy(attempts_max=limits.ATTEMPTS_MAX))
def test_delay_before_is_bounded_for_every_allowed_attempt(policy: RetryPolicy) -> None:
    """Goal: any valid policy yields a finite, capped delay for every attempt it allows: the
    backoff never shrinks, and a jittered delay stays between 0 and it (the explicit example
    is the default backoff at the largest allowed attempt count).

    Method: property over valid policies: for attempts 1..attempts_max the backoff (jitter
    off) is between 0 and backoff_max and never shrinks; the policy's own delay is between 0
    and that backoff.
    """
    exact = dataclasses.replace(policy, jitter=False)
    previous = timedelta(0)
    for attempt in range(1, policy.attempts_max + 1):
        backoff = exact.delay_before(attempt, identity="effect-1")
        assert previous <= backoff <= policy.backoff_max
        assert timedelta(0) <= policy.delay_before(attempt, identity="effect-1") <= backoff
        previous = backoff


def test_full_jitter_spreads_retries_and_is_fixed_by_identity() -> None:
    """Goal: the retries of many effects that failed together spread over the whole backoff
    (full jitter), while one attempt of one effect always waits the same (issue 15, item 7:
    retries had no jitter, so the retries of many instances lined up).

    Method: the default policy with a 1 s backoff, the second attempt of 1000 effect keys:
    the delays are distinct, cover [0, 1 s) evenly (mean near 0.5 s, some under 0.1 s and over
    0.9 s), never exceed 1 s; asking again gives the same delays; another attempt of the same
    key draws another delay.
    """
    policy = RetryPolicy(backoff_initial=timedelta(seconds=1), backoff_max=timedelta(seconds=1))
    keys = [f"lf:default:bank/post:wf_{n:05d}/r1/s2/effect" for n in range(1000)]
    delays = [policy.delay_before(2, identity=key).total_seconds() for key in keys]
    assert len(set(delays)) > 990
    assert all(0 <= delay <= 1 for delay in delays)
    assert 0.45 < sum(delays) / len(delays) < 0.55
    assert min(delays) < 0.1
    assert max(delays) > 0.9
    assert [policy.delay_before(2, identity=key).total_seconds() for key in keys] == delays
    assert policy.delay_before(3, identity=keys[0]) != policy.delay_before(2, identity=keys[0])


def test_jitter_is_recorded_only_when_it_is_off() -> None:
    """Goal: the default policy's record (which enters workflow fingerprints) is unchanged by
    jitter, and a policy without jitter says so in its record.

    Method: compare the default record's keys with the ones recorded before jitter existed;
    round-trip both policies through their records.
    """
    keys = {"attempts_max", "backoff_initial_us", "backoff_multiplier", "backoff_max_us"}
    assert set(RetryPolicy().to_record()) == {*keys, "retry_on"}
    exact = RetryPolicy(jitter=False)
    assert exact.to_record()["jitter"] is False
    for policy in (RetryPolicy(), exact):
        assert RetryPolicy.from_record(policy.to_record()) == policy


def test_retries_matches_class_names_and_error_codes() -> None:
    """Goal: ``retry_on`` names errors by class (anywhere in the MRO) or by participant code.

    Method: ask policies about a TimeoutError, a ValueError and EffectRejectedErrors with codes.
    """
    by_class = RetryPolicy(retry_on=("OSError",))
    assert by_class.retries(_names(TimeoutError()))  # TimeoutError is an OSError
    assert not by_class.retries(_names(ValueError()))
    by_code = RetryPolicy(retry_on=("busy",))
    assert by_code.retries(_names(EffectRejectedError(error_code="busy")))
    assert not by_code.retries(_names(EffectRejectedError(error_code="no-funds")))
    assert RetryPolicy().retries(_names(ValueError()))  # empty retry_on retries everything


@settings(derandomize=True, database=None)
@given(policy=policies)
@example(policy=RetryPolicy(backoff_initial=1001 * MS, backoff_max=60_001 * MS))
def test_retry_policy_record_round_trip(policy: RetryPolicy) -> None:
    """Goal: the policy recorded with a step is exactly the policy that was declared.

    Method: property over microsecond-granular policies: ``from_record(to_record(p)) == p``,
    also through JSON text (which is how the record is stored). The explicit example is a
    backoff whose milliseconds are not exact in binary floating point.
    """
    record = policy.to_record()
    assert RetryPolicy.from_record(record) == policy
    assert RetryPolicy.from_record(json.loads(json.dumps(record))) == policy


# -- participants and effects -----------------------------------------------------------------


async def _apply(call: EffectCall) -> dict[str, Any]:
    return {"applied": call.idempotency_key}


def test_effect_without_classification_is_refused_naming_it() -> None:
    """Goal: declaring nothing is an error at registration, not a default (docs/design.md).

    Method: declare ``payments.charge`` without a classification; the RegistrationError names
    the effect and the participant keeps no declaration.
    """
    payments = Participant("payments")
    with pytest.raises(RegistrationError, match=r"payments\.charge") as refused:
        payments.effect("charge")(_apply)
    assert refused.value.code == "LF101"
    assert payments.effects == {}


def test_unknown_classification_is_refused() -> None:
    """Goal: only the four designed classifications exist.

    Method: declare with a misspelt string; expect RegistrationError quoting it.
    """
    with pytest.raises(RegistrationError, match="undoable"):
        Participant("payments").effect("charge", classification="undoable")(_apply)


@pytest.mark.parametrize("classification", [*Classification, *(c.value for c in Classification)])
def test_every_classification_is_accepted_as_enum_or_string(
    classification: Classification | str,
) -> None:
    """Goal: a classification can be given as the enum or its documented string.

    Method: declare an effect with each; the declaration holds the enum member.
    """
    declaration = Participant("p").effect("op", classification=classification)(_apply)
    assert declaration.classification is Classification(classification)
    assert declaration.operation == "op"


def test_only_forward_recovery_only_is_a_pivot() -> None:
    """Goal: the pivot rule applies to forward-recovery-only effects and no others.

    Method: read ``is_pivot`` of every classification.
    """
    assert {c for c in Classification if c.is_pivot} == {Classification.FORWARD_RECOVERY_ONLY}


def test_duplicate_operation_is_refused() -> None:
    """Goal: one operation name means one declaration.

    Method: declare ``charge`` twice (once by the function's name); the second is refused and
    the first stays.
    """
    payments = Participant("payments")

    @payments.effect(classification="compensatable")
    async def charge(call: EffectCall) -> None: ...

    with pytest.raises(RegistrationError, match="twice"):
        payments.effect("charge", classification="reversible")(_apply)
    assert payments.effects["charge"] is charge


def test_effect_timeout_must_be_positive() -> None:
    """Goal: a dispatch always has a deadline.

    Method: declare with timeout 0; expect RegistrationError.
    """
    with pytest.raises(RegistrationError, match="timeout"):
        Participant("p").effect("op", classification="reversible", timeout_seconds=0)(_apply)


BAD_NAMES: list[Any] = ["", "1starts-with-digit", "has space", "slash/ed", "x" * 201, 42, None]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused(name: Any) -> None:
    """Goal: names that cannot be keys, paths or log fields are refused everywhere.

    Method: use each bad name as a participant, an operation and a workflow name.
    """
    with pytest.raises(RegistrationError):
        Participant(name)
    if isinstance(name, str) and name:
        with pytest.raises(RegistrationError):
            Participant("p").effect(name, classification="reversible")(_apply)
    with pytest.raises(RegistrationError):
        Registry().workflow(name=name, version=1)


def test_good_names_are_accepted() -> None:
    """Goal: the documented alphabet (letters, digits, '_', '.', '-') and length are allowed.

    Method: declare a participant, an operation and a workflow with boundary names.
    """
    Participant("_a.b-c_9")
    Participant("x" * limits.NAME_LENGTH_MAX)
    Participant("p").effect("v2.charge-now", classification="reversible")(_apply)
    Registry().workflow(name="orders.v2", version=1)


def test_registry_refuses_a_second_participant_of_the_same_name() -> None:
    """Goal: one name, one participant (keys are namespaced by participant name).

    Method: add a participant twice (allowed: same object), then another with its name.
    """
    registry = Registry()
    payments = registry.add_participant(Participant("payments"))
    assert registry.add_participant(payments) is payments
    with pytest.raises(RegistrationError, match="payments"):
        registry.add_participant(Participant("payments"))


def test_registry_effect_lookup() -> None:
    """Goal: a recorded effect is found again by participant and operation, or refused.

    Method: look up a declared and an undeclared effect.
    """
    registry = Registry()
    payments = registry.add_participant(Participant("payments"))
    charge = payments.effect("charge", classification="compensatable")(_apply)
    assert registry.effect("payments", "charge") is charge
    with pytest.raises(RegistrationError, match=r"payments\.refund"):
        registry.effect("payments", "refund")


# -- workflows and the registry ---------------------------------------------------------------


def test_non_async_workflow_is_refused() -> None:
    """Goal: workflows are ``async def`` (the executor awaits them).

    Method: register a plain function; expect RegistrationError.
    """

    def order(ctx: Any) -> None: ...

    with pytest.raises(RegistrationError, match="async"):
        Registry().workflow(name="order", version=1)(order)  # type: ignore[arg-type]  # on purpose


@pytest.mark.parametrize("version", [0, -1, True, 1.5, "1"])
def test_workflow_version_must_be_a_positive_integer(version: Any) -> None:
    """Goal: versions are 1, 2, 3...: pinned instances compare them as integers.

    Method: register with a bad version; expect RegistrationError before any function is given.
    """
    with pytest.raises(RegistrationError, match="version"):
        Registry().workflow(name="order", version=version)


def test_duplicate_version_is_refused() -> None:
    """Goal: a (name, version) pair names exactly one definition.

    Method: register version 1 twice; the second is refused and the first stays.
    """
    registry = Registry()

    async def first(ctx: Any) -> None: ...

    async def second(ctx: Any) -> None: ...

    registry.workflow(name="order", version=1)(first)
    with pytest.raises(RegistrationError, match="twice"):
        registry.workflow(name="order", version=1)(second)
    assert registry.get("order", 1).function is first


def test_get_refuses_unknown_workflows_and_versions() -> None:
    """Goal: asking for what is not registered is a specific, catchable error.

    Method: ask for an unknown name (LF102, ``workflow`` attribute) and an unknown version of a
    known one (LF103, ``workflow`` and ``version`` attributes).
    """
    registry = Registry()

    async def order(ctx: Any) -> None: ...

    registry.workflow(name="order", version=1)(order)
    with pytest.raises(UnknownWorkflowError) as unknown:
        registry.get("refund")
    assert unknown.value.code == "LF102"
    assert unknown.value.workflow == "refund"
    with pytest.raises(UnknownVersionError) as missing:
        registry.get("order", 3)
    assert missing.value.code == "LF103"
    assert missing.value.workflow == "order"
    assert missing.value.version == 3
    assert isinstance(missing.value, ConfigurationError)


def test_latest_version_is_chosen_when_none_is_asked() -> None:
    """Goal: new instances start on the newest version unless the caller pins one.

    Method: register versions 2, 1 and 10 (out of order); ``get`` without a version returns 10,
    with one returns that one.
    """
    registry = Registry()
    for version in (2, 1, 10):

        async def order(ctx: Any) -> None: ...

        registry.workflow(name="order", version=version)(order)
    assert registry.get("order").version == 10
    assert registry.get("order", 2).version == 2
    assert sorted(d.version for d in registry.definitions()) == [1, 2, 10]


def _adds_one() -> WorkflowFunction:
    async def order(ctx: Any, n: int) -> int:
        return n + 1

    return order


def _adds_two() -> WorkflowFunction:
    async def order(ctx: Any, n: int) -> int:
        return n + 2

    return order


def _adds_one_with_comments() -> WorkflowFunction:
    async def order(ctx: Any, n: int) -> int:
        # The same behaviour as _adds_one, explained and laid out differently.

        return n + 1  # one more

    return order


def _fingerprint(function: WorkflowFunction, **options: Any) -> str:
    registry = Registry()
    registry.workflow(name="order", version=1, **options)(function)
    return registry.get("order").fingerprint


def test_fingerprint_follows_code_not_comments() -> None:
    """Goal: the fingerprint an instance is pinned to changes with behaviour, not formatting.

    Method: register three functions all named ``order``: two with different bodies, and one
    that differs from the first only by comments and blank lines; compare fingerprints.
    """
    one, two, commented = _adds_one(), _adds_two(), _adds_one_with_comments()
    assert one.__name__ == two.__name__ == commented.__name__ == "order"
    assert _fingerprint(one) != _fingerprint(two)
    assert _fingerprint(one) == _fingerprint(commented)
    assert _fingerprint(one) == _fingerprint(_adds_one())  # deterministic


def test_fingerprint_follows_schema_config_and_policy() -> None:
    """Goal: what the design says a definition version depends on all enters the fingerprint.

    Method: register the same function with a different schema, config and step retry policy.
    """
    base = _fingerprint(_adds_one())
    assert _fingerprint(_adds_one(), schema="v2") != base
    assert _fingerprint(_adds_one(), config={"currency": "EUR"}) != base
    assert _fingerprint(_adds_one(), step_retry=RetryPolicy(attempts_max=9)) != base


# -- the codec --------------------------------------------------------------------------------


class _Opaque:
    pass


@pytest.mark.parametrize(
    "payload",
    [
        {1, 2},
        _Opaque(),
        {"nested": [object()]},
        b"bytes",
        float("nan"),
        float("inf"),
        {"x": float("-inf")},
    ],
    ids=["set", "object", "nested-object", "bytes", "nan", "inf", "nested-inf"],
)
def test_unencodable_payload_is_refused(payload: Any) -> None:
    """Goal: ledgers hold JSON data only: no objects, sets, bytes or non-finite numbers.

    Method: encode each; expect PayloadError (LF110), a LedgerflowError.
    """
    with pytest.raises(PayloadError) as refused:
        JSON.encode(payload)
    assert refused.value.code == "LF110"
    assert isinstance(refused.value, LedgerflowError)


def test_payload_size_limit() -> None:
    """Goal: an encoded payload may be at most PAYLOAD_BYTES_MAX bytes.

    Method: a string whose encoding is exactly the limit is accepted, one byte more is refused;
    a non-ASCII string is measured by its encoded bytes.
    """
    fits = "a" * (limits.PAYLOAD_BYTES_MAX - 2)  # the quotes take two bytes
    assert len(JSON.encode(fits).encode()) == limits.PAYLOAD_BYTES_MAX
    with pytest.raises(PayloadError, match="exceeds"):
        JSON.encode(fits + "a")
    wide = "é" * ((limits.PAYLOAD_BYTES_MAX - 2) // 6)  # "é" is escaped as six ASCII bytes
    assert len(JSON.encode(wide).encode()) <= limits.PAYLOAD_BYTES_MAX
    with pytest.raises(PayloadError, match="exceeds"):
        JSON.encode(wide + "é")


def test_codec_is_canonical_and_round_trips() -> None:
    """Goal: equal payloads have equal text (replay compares encodings) and decode back.

    Method: encode dicts built in different key orders; decode; decode bad text.
    """
    assert JSON.encode({"b": 1, "a": [1, 2]}) == JSON.encode({"a": [1, 2], "b": 1})
    value = {"a": [1, 2.5, None, True], "é": "ü"}
    assert JSON.decode(JSON.encode(value)) == value
    with pytest.raises(PayloadError):
        JSON.decode("{not json")


# -- identities and keys ----------------------------------------------------------------------

EFFECT = effect_id(InstanceId("wf_1"), RunNumber(1), StepSeq(3))


def _key(**changes: Any) -> IdempotencyKey:
    parts: dict[str, Any] = {
        "tenant": TenantId("acme"),
        "effect": EFFECT,
        "participant": "payments",
        "operation": "charge",
    }
    parts.update(changes)
    return idempotency_key(**parts)


def test_idempotency_key_is_derived_from_identity() -> None:
    """Goal: the same effect always gets the same key, and any other identity another key.

    Method: derive the key twice; then change one of tenant, effect, participant, operation at a
    time and check every key differs from every other.
    """
    assert _key() == _key()
    keys = [
        _key(),
        _key(tenant=TenantId("other")),
        _key(effect=effect_id(InstanceId("wf_1"), RunNumber(1), StepSeq(4))),
        _key(effect=effect_id(InstanceId("wf_1"), RunNumber(2), StepSeq(3))),
        _key(effect=effect_id(InstanceId("wf_2"), RunNumber(1), StepSeq(3))),
        _key(participant="bank"),
        _key(operation="refund"),
    ]
    assert len(set(keys)) == len(keys)


def test_compensation_key_is_its_own_namespace() -> None:
    """Goal: a compensation never reuses the original key (invariant 3).

    Method: the compensation key differs from the original, is deterministic, differs per
    original, and can never equal an original key (they live in different namespaces).
    """
    original = _key()
    compensation = compensation_key(original)
    assert compensation != original
    assert compensation == compensation_key(original)
    assert compensation != compensation_key(_key(operation="refund"))
    assert not compensation.startswith(original[:3])
    assert compensation_key(compensation) != compensation


def test_command_and_effect_ids_are_stable_and_distinct() -> None:
    """Goal: a command id and an effect id are fixed by (instance, run, seq) alone.

    Method: derive them twice and for neighbouring positions.
    """
    ids = {
        command_id(InstanceId("wf_1"), RunNumber(1), StepSeq(1)),
        command_id(InstanceId("wf_1"), RunNumber(1), StepSeq(2)),
        command_id(InstanceId("wf_1"), RunNumber(2), StepSeq(1)),
        effect_id(InstanceId("wf_1"), RunNumber(1), StepSeq(1)),
    }
    assert len(ids) == 4
    assert effect_id(InstanceId("a"), RunNumber(1), StepSeq(1)) == EffectId("a/r1/s1/effect")
    assert command_id(InstanceId("a"), RunNumber(1), StepSeq(1)) == command_id(
        InstanceId("a"), RunNumber(1), StepSeq(1)
    )
