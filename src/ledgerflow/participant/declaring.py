"""What the adapters of a participant service share when they declare it (internal): the
checks of what they are given, and one effect function per operation."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ledgerflow.errors import EffectRejectedError, RegistrationError
from ledgerflow.model import arguments
from ledgerflow.model.definition import EffectCall


def check_url(url: object, *, what: str, schemes: tuple[str, ...], example: str) -> None:
    """Refuse a service URL that is not a string with one of ``schemes``."""
    if not isinstance(url, str) or not url.startswith(schemes):
        raise RegistrationError(
            f"{what}: the URL is the service's address as a string, e.g. {example!r}, not "
            f"{described(url)}"
        )


def check_operations(operations: object, *, what: str, example: str) -> None:
    """Refuse ``operations=`` that is not a non-empty dict of operation to classification."""
    if not isinstance(operations, Mapping) or not operations:
        raise RegistrationError(
            f"{what}: operations= takes a dict of operation name to classification, e.g. "
            f"operations={{{example}}}, not {described(operations)}"
        )


def described(value: object) -> str:
    if isinstance(value, str):
        return repr(value)  # a short string the caller typed: quoting it is the clearest
    return arguments.kind_of(value)


def per_operation(
    name: str, operation: str, send: Callable[[str, EffectCall], Awaitable[Any]]
) -> Callable[[EffectCall], Awaitable[Any]]:
    """The effect function of one operation: ``send(operation, call)``. A closure per
    operation, because one effect function serves exactly one declared operation."""

    async def apply(call: EffectCall) -> Any:
        return await send(operation, call)

    apply.__qualname__ = f"{name}.{operation}"
    return apply


def request_text(name: str, operation: str, call: EffectCall) -> str:
    """One dispatch as the services read it, in JSON: the key, the operation, the payload, the
    effect, the instance and the attempt (and a compensation's original key)."""
    request = {
        "key": call.idempotency_key,
        "operation": operation,
        "payload": call.payload,
        "effect_id": call.effect_id,
        "instance_id": call.instance_id,
        "attempt": call.attempt,
    }
    if call.original_key is not None:
        request["original_key"] = call.original_key
    try:
        return json.dumps(request)
    except (TypeError, ValueError) as error:
        # Nothing left this process, so "not applied" is proven, and no retry can fix it.
        raise EffectRejectedError(
            f"{name}.{operation}: payload is not JSON: {error}",
            error_code="payload_not_json",
            retryable=False,
        ) from error
