"""What the adapters of a participant service share (internal): the checks of what they are
given, one effect function per operation, the request's text, and one connection per loop."""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from ledgerflow.errors import EffectRejectedError, RegistrationError
from ledgerflow.model import arguments
from ledgerflow.model.definition import EffectCall

Opened = TypeVar("Opened")


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
    effect, the instance, the attempt and the owner generation (and a compensation's original
    key)."""
    request = {
        "key": call.idempotency_key,
        "operation": operation,
        "payload": call.payload,
        "effect_id": call.effect_id,
        "instance_id": call.instance_id,
        "attempt": call.attempt,
    }
    if call.generation is not None:
        request["generation"] = call.generation
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


class PerLoop(Generic[Opened]):
    """One connection to a broker per event loop (a client is bound to the loop it was opened
    on), opened on first use under a lock, however many effects publish at once, and opened
    again once ``closed`` says it is."""

    def __init__(
        self,
        opener: Callable[[], Awaitable[Opened]],
        *,
        closed: Callable[[Opened], bool],
        closer: Callable[[Opened], Awaitable[object]],
    ) -> None:
        self._opener, self._closed, self._closer = opener, closed, closer
        self._opened: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Opened] = (
            weakref.WeakKeyDictionary()
        )
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self) -> Opened:
        """The running loop's connection, opened now if it has none that is open."""
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(loop, asyncio.Lock()):
            opened = self._opened.get(loop)
            if opened is None or self._closed(opened):
                if opened is not None:
                    await self._closer(opened)
                opened = self._opened[loop] = await self._opener()
        return opened

    async def close(self) -> None:
        """Close the running loop's connection, if it has one."""
        opened = self._opened.pop(asyncio.get_running_loop(), None)
        if opened is not None:
            await self._closer(opened)
