"""Calling user code: async functions on the loop, blocking ones on a thread (internal)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any


async def call_user(function: Callable[..., Any], *args: Any, inline: bool = False) -> Any:
    """Await an ``async def``; run a plain function off the event loop (or, ``inline``, on it,
    so that a simulation does not depend on when a thread finishes)."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    if inline:
        result = function(*args)
    else:
        result = await asyncio.to_thread(function, *args)
    if inspect.isawaitable(result):
        return await result
    return result


def error_names(exc: BaseException) -> tuple[str, ...]:
    """The names a retry policy may match an error by: its classes and its code."""
    names = [cls.__name__ for cls in type(exc).__mro__ if cls not in (object, BaseException)]
    code = getattr(exc, "error_code", None)
    if isinstance(code, str):
        names.append(code)
    return tuple(names)


def describe_error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000]}
