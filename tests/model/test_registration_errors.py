"""Registration errors name the fix (issue 24): a wrong-type argument to a declaration says
what to pass instead, in a few words, never the repr of what it got.

The natural guess ``@inventory.compensation(reserve)`` (the effect to undo, where the
compensating operation's name is taken) dumped a whole ``EffectDeclaration``; each case below
is one argument of ``Participant``, its ``effect``, ``compensation`` and ``lookup``
decorators, ``Registry.add_participant`` and ``Registry.workflow`` given the wrong kind of
value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import ConfigurationError, RegistrationError
from ledgerflow.participant import remote_participant


def _inventory() -> tuple[lf.Participant, Any]:
    inventory = lf.Participant("inventory")

    @inventory.effect(classification="reversible")
    async def reserve(call: lf.EffectCall) -> dict[str, Any]:
        return {}

    return inventory, reserve


async def _undo(call: lf.EffectCall) -> None:
    return None


async def _flow(ctx: lf.WorkflowContext, value: Any) -> None:
    return None


def _refused(declare: Callable[[], object]) -> str:
    with pytest.raises(RegistrationError) as refused:
        declare()
    message = str(refused.value)
    # Never a repr: not of a declaration, a participant, a function or a policy.
    dumps = ("EffectDeclaration(", "deduplicates=False)", "<function", "backoff_initial=", " at 0x")
    for dumped in dumps:
        assert dumped not in message, message
    return message


def test_compensation_given_the_effect_it_undoes_says_pass_the_name() -> None:
    """Goal: the issue's case. Method: ``@inventory.compensation(reserve)``: the message says
    to pass the operation name as a string and quotes the string to write."""
    inventory, reserve = _inventory()
    message = _refused(lambda: inventory.compensation(reserve))
    assert "@inventory.compensation takes the compensating operation's name as a string" in message
    assert (
        "e.g. @inventory.compensation('undo_reserve'), not the effect inventory.reserve" in message
    )
    assert "pass the operation name as a string" in message
    assert "compensation='undo_reserve'" in message


def test_compensation_without_parentheses_names_the_function_as_the_string() -> None:
    """Goal: ``@inventory.compensation`` used bare (the function lands in ``operation``).
    Method: call it with a function: the message offers the function's name as the string."""
    inventory, _ = _inventory()
    message = _refused(lambda: inventory.compensation(_undo))  # type: ignore[arg-type]
    assert "@inventory.compensation('_undo')" in message
    assert "not the function _undo" in message


def test_effect_compensation_given_a_declaration_says_pass_the_operation_name() -> None:
    """Goal: ``effect(compensation=refund)`` with the compensation's declaration. Method: the
    message says "pass the operation name as a string: 'refund'"."""
    payments = lf.Participant("payments")

    @payments.compensation("refund")
    async def refund(call: lf.EffectCall) -> None:
        return None

    def declare() -> object:
        return payments.effect(classification="compensatable", compensation=refund)(_undo)  # type: ignore[arg-type]

    message = _refused(declare)
    assert "pass the operation name as a string: 'refund'" in message
    assert "not the effect payments.refund" in message


def test_effect_without_parentheses_says_how_to_call_it() -> None:
    """Goal: ``@payments.effect`` used bare was accepted silently and failed far away. Method:
    it is refused at once with the call to write."""
    payments = lf.Participant("payments")
    message = _refused(lambda: payments.effect(_undo))  # type: ignore[arg-type]
    assert "@payments.effect(classification='compensatable')" in message
    assert "not the function _undo" in message


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"classification": 3}, "classification= takes one of 'reversible'"),
        ({"classification": "undoable"}, "choose one of 'reversible'"),
        ({"retry": 3}, "retry= takes a RetryPolicy, e.g. retry=lf.RetryPolicy(attempts_max=3)"),
        ({"timeout_seconds": "30"}, "timeout_seconds= takes a number of seconds, e.g."),
        ({"timeout_seconds": 0}, "timeout_seconds must be positive"),
        ({"completes_by_callback": "soon"}, "completes_by_callback= takes a number of seconds"),
        ({"contract_version": 1.5}, "contract_version must be an int or a str"),
    ],
    ids=[
        "classification-type",
        "classification-value",
        "retry",
        "timeout-type",
        "timeout-zero",
        "callback",
        "contract",
    ],
)
def test_each_effect_option_of_the_wrong_kind_says_what_it_takes(
    options: dict[str, Any], expected: str
) -> None:
    """Goal: every option of ``effect`` names what it takes. Method: one wrong value each; the
    message names the effect and the fix."""
    payments = lf.Participant("payments")
    declare_options = {"classification": "compensatable", **options}
    message = _refused(lambda: payments.effect(**declare_options)(_undo))
    assert "payments._undo" in message
    assert expected in message


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"retry": {"attempts_max": 3}}, "retry= takes a RetryPolicy"),
        ({"timeout_seconds": None}, "timeout_seconds= takes a number of seconds"),
        ({"precondition": "stock > 0"}, "precondition= takes a function (async def or def)"),
    ],
    ids=["retry", "timeout", "precondition"],
)
def test_each_compensation_option_of_the_wrong_kind_says_what_it_takes(
    options: dict[str, Any], expected: str
) -> None:
    """Goal: the same for ``compensation``'s options. Method: one wrong value each."""
    inventory, _ = _inventory()
    message = _refused(lambda: inventory.compensation("release", **options))
    assert "compensation inventory.release" in message
    assert expected in message


def test_participant_options_and_lookup_say_what_they_take() -> None:
    """Goal: ``Participant``'s own arguments and ``@participant.lookup``. Method: a name that
    is no string, ``deduplicates="yes"``, ``lookup_retry=5``, a lookup that is no function."""
    assert "a participant name is a string, e.g. 'payments', not an int (7)" in _refused(
        lambda: lf.Participant(7)  # type: ignore[arg-type]
    )
    assert "deduplicates= takes True or False, not a str" in _refused(
        lambda: lf.Participant("bank", deduplicates="yes")  # type: ignore[arg-type]
    )
    assert "lookup_retry= takes a RetryPolicy" in _refused(
        lambda: lf.Participant("bank", lookup_retry=5)  # type: ignore[arg-type]
    )
    bank = lf.Participant("bank")
    assert "@bank.lookup takes a function (async def or def), not a dict" in _refused(
        lambda: bank.lookup({})  # type: ignore[arg-type]
    )


def test_registry_arguments_say_what_they_take() -> None:
    """Goal: ``add_participant`` and ``workflow``'s arguments. Method: a participant's name
    where the participant is taken, and each workflow option of the wrong kind."""
    registry = lf.Registry()
    assert "add_participant takes a Participant, e.g." in _refused(
        lambda: registry.add_participant("payments")  # type: ignore[arg-type]
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": _flow, "version": 1}, "a workflow name is a string, e.g."),
        ({"name": "order", "version": "1"}, "version= takes a positive integer, e.g. version=1"),
        ({"name": "order", "version": 1, "step_retry": 2}, "step_retry= takes a RetryPolicy"),
        ({"name": "order", "version": 1, "defect_retry": 2}, "defect_retry= takes a RetryPolicy"),
        ({"name": "order", "version": 1, "config": [1]}, "config= takes a dict of settings"),
        (
            {"name": "order", "version": 1, "business_failures": ValueError},
            "business_failures= takes a list of exception classes",
        ),
        (
            {"name": "order", "version": 1, "business_failures": [ValueError("x")]},
            "(pass the class itself: ValueError)",
        ),
        ({"name": "order", "version": 1, "on_defect": "explode"}, "on_defect must be one of"),
    ]
    for options, expected in cases:
        message = _refused(lambda options=options: registry.workflow(**options)(_flow))
        assert expected in message, (options, message)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"base_url": 8800}, "base_url takes the service's URL as a string, e.g."),
        ({"base_url": "127.0.0.1:8800"}, "not '127.0.0.1:8800'"),
        ({"operations": ["reserve"]}, "operations= takes a dict of operation name to"),
        ({"compensations": [("book", "cancel")]}, "compensations= takes a dict of operation"),
        ({"has_lookup": "yes"}, "has_lookup= takes True or False, not a str"),
        ({"operations": {"reserve": "undoable"}}, "choose one of 'reversible'"),
    ],
    ids=["url-type", "url-scheme", "operations", "compensations", "has-lookup", "class"],
)
def test_remote_participant_arguments_say_what_they_take(
    options: dict[str, Any], expected: str
) -> None:
    """Goal: ``remote_participant`` (ledgerflow.participant) says what to pass too, where a
    list for a dict failed with an AttributeError. Method: one wrong value each."""
    arguments: dict[str, Any] = {
        "base_url": "http://127.0.0.1:8800",
        "operations": {"reserve": "reversible"},
        "deduplicates": False,
        "has_lookup": True,
        **options,
    }
    assert expected in _refused(lambda: remote_participant("inventory", **arguments))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"backoff_initial": 0.1}, "backoff_initial= takes a datetime.timedelta, e.g."),
        ({"backoff_max": 30}, "backoff_max= takes a datetime.timedelta"),
        ({"attempts_max": "3"}, "attempts_max= takes an int, e.g. attempts_max=5"),
        ({"backoff_multiplier": "2"}, "backoff_multiplier= takes a number"),
        ({"retry_on": "timeout"}, "retry_on= takes a tuple of error names, e.g."),
        ({"jitter": 1}, "jitter= takes True or False (got an int for jitter)"),
    ],
    ids=["initial", "max", "attempts", "multiplier", "retry-on", "jitter"],
)
def test_retry_policy_fields_of_the_wrong_kind_say_what_they_take(
    options: dict[str, Any], expected: str
) -> None:
    """Goal: ``lf.RetryPolicy(backoff_initial=0.1)`` (seconds where a timedelta is taken)
    failed with a TypeError comparing the two. Method: one wrong field each: a
    ConfigurationError naming the field and the kind it takes."""
    with pytest.raises(ConfigurationError) as refused:
        lf.RetryPolicy(**options)
    assert expected in str(refused.value)


def test_retry_policy_takes_a_list_of_error_names_as_its_tuple() -> None:
    """Goal: a list for ``retry_on`` keeps working, recorded as the tuple it is. Method:
    build one from a list; it equals the one built from the tuple."""
    assert lf.RetryPolicy(retry_on=["timeout"]) == lf.RetryPolicy(retry_on=("timeout",))
