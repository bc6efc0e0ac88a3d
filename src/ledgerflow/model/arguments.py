"""The checks of a declaration's arguments: a wrong type says what to pass instead (internal).

Issue 24: the natural guess ``@inventory.compensation(reserve)`` (the effect it undoes, not
the compensating operation's name) was refused with a message that dumped the whole
``EffectDeclaration``. Every check here names the argument, says what kind of value it takes
with an example, and describes what it got in a few words (:func:`kind_of`), never its repr:
a declaration's repr holds its participant, its function and its policies.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ledgerflow.errors import RegistrationError
from ledgerflow.model.classification import Classification
from ledgerflow.model.retry import RetryPolicy


def kind_of(value: object) -> str:
    """A few words for what ``value`` is: ``the effect payments.charge``, ``the function
    refund``, ``the class ValueError``, ``an int (3)``; never a whole repr."""
    participant = getattr(value, "participant", None)
    operation = getattr(value, "operation", None)
    if isinstance(operation, str) and isinstance(getattr(participant, "name", None), str):
        return f"the effect {participant.name}.{operation}"  # type: ignore[union-attr]
    if inspect.isclass(value):
        return f"the class {value.__name__}"
    if inspect.isfunction(value) or inspect.ismethod(value):
        return f"the function {value.__name__}"
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    if isinstance(value, bool | int | float):
        return f"{article} {kind} ({value!r})"
    return f"{article} {kind}"


def operation_name(value: object, *, where: str, example: str) -> str:
    """An operation name passed as a string; the name of a declared effect or function given
    instead is offered as the string to pass."""
    if isinstance(value, str):
        return value
    undone = getattr(value, "operation", None)
    if isinstance(undone, str):
        # The effect to undo, given where the compensating operation's own name is taken.
        example = f"undo_{undone}"
        raise RegistrationError(
            f"{where} takes the compensating operation's name as a string, e.g. "
            f"{where}({example!r}), not {kind_of(value)}: pass the operation name as a "
            f"string, and name it on the effect it undoes with compensation={example!r}"
        )
    offered = getattr(value, "__name__", None)
    hint = f"the operation name as a string, e.g. {where}({example!r})"
    if isinstance(offered, str) and offered:
        hint = f"the operation name as a string: {where}({offered!r})"
    raise RegistrationError(f"{where} takes {hint}, not {kind_of(value)}")


def compensation_name(value: object, *, effect: str) -> str | None:
    """``effect(compensation=...)``: the compensating operation's name, as a string."""
    if value is None or isinstance(value, str):
        return value
    offered = getattr(value, "operation", None) or getattr(value, "__name__", None)
    name = offered if isinstance(offered, str) and offered else "refund"
    raise RegistrationError(
        f"effect {effect}: compensation= takes the compensating operation's name as a string "
        f"(declared with @participant.compensation({name!r})): pass the operation name as a "
        f"string: {name!r}, not {kind_of(value)}"
    )


def retry_policy(value: object, *, what: str, option: str = "retry") -> RetryPolicy:
    if isinstance(value, RetryPolicy):
        return value
    raise RegistrationError(
        f"{what}: {option}= takes a RetryPolicy, e.g. {option}=lf.RetryPolicy(attempts_max=3), "
        f"not {kind_of(value)}"
    )


def seconds(value: object, *, what: str, option: str, optional: bool = False) -> float | None:
    """A positive number of seconds (``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RegistrationError(
            f"{what}: {option}= takes a number of seconds, e.g. {option}=30, not {kind_of(value)}"
        )
    if value <= 0:
        raise RegistrationError(f"{what}: {option} must be positive, not {value!r}")
    return float(value)


def duration(value: object, *, what: str, option: str) -> timedelta | None:
    """An optional positive ``timedelta``."""
    if value is None or (isinstance(value, timedelta) and value > timedelta(0)):
        return value
    raise RegistrationError(
        f"{what}: {option}= takes a positive datetime.timedelta, e.g. "
        f"{option}=timedelta(days=7), not {kind_of(value)}"
    )


def flag(value: object, *, what: str, option: str) -> bool:
    if isinstance(value, bool):
        return value
    raise RegistrationError(f"{what}: {option}= takes True or False, not {kind_of(value)}")


def function(value: object, *, what: str, option: str) -> Callable[..., Any] | None:
    """An optional callable (a precondition, a lookup)."""
    if value is None or callable(value):
        return value
    where = f"{what}: {option}" if option else what
    raise RegistrationError(f"{where} takes a function (async def or def), not {kind_of(value)}")


def exception_class(value: object, *, workflow: str) -> type[BaseException]:
    if isinstance(value, type) and issubclass(value, Exception):
        return value
    hint = ""
    if isinstance(value, BaseException):
        hint = f" (pass the class itself: {type(value).__name__})"
    raise RegistrationError(
        f"workflow {workflow}: business_failures= takes exception classes, e.g. "
        f"business_failures=[OutOfStock], not {kind_of(value)}{hint}"
    )


def classification(given: object, what: str) -> Classification:
    """An effect's classification, or a RegistrationError naming the choices."""
    choices = ", ".join(repr(c.value) for c in Classification)
    if given is None:
        raise RegistrationError(f"{what} declares no classification; choose one of {choices}")
    if not isinstance(given, str | Classification):
        raise RegistrationError(
            f"{what}: classification= takes one of {choices} (or an lf.Classification), "
            f"not {kind_of(given)}"
        )
    try:
        return Classification(given)
    except ValueError:
        raise RegistrationError(
            f"{what}: unknown classification {given!r}; choose one of {choices}"
        ) from None
