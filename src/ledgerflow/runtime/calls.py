"""Calling user code: async functions on the loop, blocking ones on a thread, each within its
deadline where it has one (internal)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import traceback
from collections.abc import Callable
from typing import Any

from ledgerflow import limits
from ledgerflow.runtime.clock import Clock


async def call_user(function: Callable[..., Any], *args: Any, inline: bool = False) -> Any:
    """Await an ``async def``; run a plain function off the event loop (or, ``inline``, on it,
    so that a simulation does not depend on when a thread finishes)."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    if inline:
        result = function(*args)
    else:
        result = await _on_a_thread(function, *args)
    if inspect.isawaitable(result):
        return await result
    return result


async def _on_a_thread(function: Callable[..., Any], *args: Any) -> Any:
    """Run ``function`` on a thread; cancelled, wait until the thread has really returned.

    A thread cannot be stopped. Returning at once on cancellation would let the worker take the
    instance up again and run the same step a second time while the first still runs, so the
    caller's cancellation takes effect only once the thread is done.
    """
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    running = loop.run_in_executor(None, functools.partial(context.run, function, *args))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        while not running.done():
            try:
                await asyncio.wait([running])
            except asyncio.CancelledError:
                continue
        raise


class DeadlinePassedError(TimeoutError):
    """A participant gave no answer by the call's deadline: its outcome is unknown.

    The call was cancelled then and is not waited for; whatever it answers later is late, and
    never taken as the outcome (``on_late`` receives it, as evidence only).
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g}s (the call's deadline)")
        self.seconds = seconds


class HeartbeatMissedError(TimeoutError):
    """An effect declared with a heartbeat timeout went that long without a durable heartbeat:
    the attempt is cut off and its outcome is unknown (the participant may have applied it).
    As after a deadline, the call is cancelled and a later answer is evidence only."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no heartbeat within {seconds:g}s (the effect's heartbeat_timeout)")
        self.seconds = seconds


# Calls that kept running after their deadline (their code ignored the cancellation): held
# here until they end, so that they are neither garbage-collected mid-flight nor forgotten.
_late: set[asyncio.Task[Any]] = set()


async def call_by_deadline(
    function: Callable[..., Any],
    *args: Any,
    seconds: float,
    clock: Clock,
    inline: bool = False,
    on_late: Callable[[Any], None] | None = None,
    heartbeat_due: Callable[[], float] | None = None,
    heartbeat_seconds: float | None = None,
) -> Any:
    """Call user code and return its answer if it comes within ``seconds`` on ``clock``;
    otherwise cancel it and raise :class:`DeadlinePassedError` at once. ``heartbeat_due``
    gives a second deadline that moves (an effect's heartbeats, ``heartbeat_seconds`` apart at
    most): past it the call is cancelled likewise, with :class:`HeartbeatMissedError`.

    ``asyncio.wait_for`` is not used: when the call catches its cancellation and returns a
    value anyway, it hands that late value back as if it had come in time, and a late answer
    must never complete an effect on its own. A late answer goes to ``on_late`` instead.
    """
    call = asyncio.ensure_future(call_user(function, *args, inline=inline))
    deadline = clock.now() + seconds
    missed: Exception | None = None
    while missed is None:
        # The heartbeat's deadline moves on with each durable heartbeat: wait for the nearer
        # of the two, and look again when the heartbeat's has moved meanwhile.
        due = deadline if heartbeat_due is None else min(deadline, heartbeat_due())
        alarm = clock.alarm(due)
        try:
            await asyncio.wait([call, alarm], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            alarm.cancel()
        if call.done():
            return call.result()
        now = clock.now()
        if now >= deadline:
            missed = DeadlinePassedError(seconds)
        elif heartbeat_due is not None and now >= heartbeat_due():
            missed = HeartbeatMissedError(heartbeat_seconds or 0.0)
    call.cancel()
    _late.add(call)
    call.add_done_callback(functools.partial(_ended_late, on_late))
    raise missed


def _ended_late(on_late: Callable[[Any], None] | None, call: asyncio.Task[Any]) -> None:
    _late.discard(call)
    if call.cancelled() or call.exception() is not None or on_late is None:
        return
    on_late(call.result())


def error_names(exc: BaseException) -> tuple[str, ...]:
    """The names a retry policy may match an error by: its classes and its code."""
    names = [cls.__name__ for cls in type(exc).__mro__ if cls not in (object, BaseException)]
    code = getattr(exc, "error_code", None)
    if isinstance(code, str):
        names.append(code)
    return tuple(names)


def describe_error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000]}


def bounded_traceback(exc: BaseException) -> str:
    """The exception's traceback as text, kept to its last ``TRACEBACK_CHARS_MAX`` characters
    (the innermost frames and the error itself are what explain a failure)."""
    text = "".join(traceback.format_exception(exc))
    if len(text) <= limits.TRACEBACK_CHARS_MAX:
        return text
    return "...\n" + text[-(limits.TRACEBACK_CHARS_MAX - 4) :]
