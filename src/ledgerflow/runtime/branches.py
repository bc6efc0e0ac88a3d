"""Parallel branches of one run: who may take positions, in what order calls return, and how
the branches end before the run's verdict is written (internal).

Workflow code may run steps and effects at once with plain ``asyncio.gather``,
``asyncio.TaskGroup`` or ``create_task``. Three rules keep that deterministic and truthful:

- **Positions in call order.** A call takes its position synchronously, before its first
  await, so the order in which the code *called* is the order of the journal. Only the run's
  own task and tasks it started (they inherit the run's context variable) may take one; a
  call from a thread, another loop or a task started outside the run is refused
  (``concurrent_steps``).
- **Returns in position order.** A call hands its value (or its exception) back to its branch
  only after every call at a lower position has returned, and once the run is quiet: no
  branch took a new position for ``limits.BRANCH_QUIET_TURNS`` turns of the loop. So the code
  after a call runs at the same point relative to its siblings whether the call finished last
  live or at once from the journal on replay, and the positions it takes next are the same.
  The work of the calls (intents, dispatches, outcomes) still runs at the same time; only the
  hand-back is ordered.
- **Work ends truthfully.** The work of a call in a branch runs in its own task: cancelling
  the branch (a sibling failed in a ``TaskGroup``) lets that work record its outcome first,
  then the branch sees the cancellation. Before the executor writes a verdict it cancels the
  branches still running and waits for them (:meth:`Branches.close`), so no effect is in
  flight when the instance fails, compensates, parks or is released.

- **WAITING only when every branch is blocked.** A wait or timer that would park while
  branches run is held (:meth:`Branches.park`) until no call's work is running and the run is
  quiet: every open call is a held wait or done and waiting for its turn. Then one commit
  starts every held wait and makes the instance WAITING until the earliest of their timers;
  on resumption the replay takes the same positions, and each wait is asked again. A
  child's result and an asynchronous effect's callback wait are held the same way.
- **Calls without a position.** A child's result (``handle.result()``) takes no journal
  position, but takes its place in the run's order (:meth:`Branches.order`): after every
  position taken before it, before every later one, so it returns in call order too. While
  it is held, cancelling its branch ends the wait (nothing of it is in flight); an effect's
  callback wait is still waited for (its effect is).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from ledgerflow import limits
from ledgerflow.ledger.records import NoCancelRequest, Write
from ledgerflow.runtime.control import (
    Abandon,
    Cancelled,
    ContinueAsNew,
    Park,
    Suspend,
    Waiting,
)

T = TypeVar("T")

# Where a call stands in the run's order: a journal position ``(seq, 0)``, or a call that
# takes none (a child's result) ``(seq, n)``: the n-th such call made once ``seq`` positions
# were taken, so it sorts after every position taken before it and before every later one.
Key = tuple[int, int]

# The run a task belongs to: set in the run's own task, inherited by every task it starts.
_RUN: contextvars.ContextVar[object | None] = contextvars.ContextVar("ledgerflow_run", default=None)

# Control-flow signals, strongest first: when branches end with several at once (a
# ``TaskGroup``'s exception group), the strongest decides what the executor does.
CONTROL: tuple[type[BaseException], ...] = (
    Abandon,
    Park,
    Cancelled,
    ContinueAsNew,
    Suspend,
    Waiting,
)

CONCURRENT_STEPS = "concurrent_steps"


class Branches:
    """The branches of one run of one workflow function."""

    def __init__(self, positions: Callable[[], int]) -> None:
        # How many positions the run has taken: a change means a branch made progress.
        self._positions = positions
        try:
            self.main: asyncio.Task[Any] | None = asyncio.current_task()
        except RuntimeError:  # built outside a running loop (never by the executor)
            self.main = None
        self._run = object()
        self._loop: asyncio.AbstractEventLoop | None = None
        if self.main is not None:
            _RUN.set(self._run)
            self._loop = self.main.get_loop()
        # Calls in the run's order not yet handed back, each with the future its return sets;
        # how many calls took an order without a position (they count as progress too).
        self._open: dict[Key, asyncio.Future[None]] = {}
        self._ordered = 0
        self._last_order: Key = (0, 0)
        # Tasks other than the run's own that took a position.
        self.tasks: set[asyncio.Task[Any]] = set()
        # The work of the branches' open calls, each in its own task.
        self._works: set[asyncio.Future[Any]] = set()
        # Waits held until every branch is blocked (name, writes, due), by position; open
        # positions whose work is done and that wait for their turn; set on every change.
        self._held: dict[Key, tuple[str, list[Write], float]] = {}
        self._turns: set[Key] = set()
        # Works held in a wait that their branch's cancellation drops (nothing in flight: a
        # child's result), and works whose branch was cancelled.
        self._droppable: set[asyncio.Future[Any]] = set()
        self._dropped: set[asyncio.Future[Any]] = set()
        self._changed = asyncio.Event()
        self._parking = False
        # The control-flow signal that ends the run: no call returns any more, each raises it.
        self._stop: BaseException | None = None
        self._closed = False

    def admit(self, what: str) -> None:
        """Refuse a call from a task that is not this run's or one it started."""
        if self.main is None:
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if self._stop is not None:
            raise self._stop
        if task is self.main and not self._closed:
            return
        if self._closed:
            raise Park(
                CONCURRENT_STEPS,
                f"{what} was called after the run ended: a task the workflow started outlived "
                "it (await or cancel every task before the workflow function returns)",
            )
        if task is None or _RUN.get() is not self._run or task.get_loop() is not self._loop:
            raise Park(
                CONCURRENT_STEPS,
                f"{what} was called from a task that this run did not start (a thread, "
                "another event loop or a task created outside the workflow): positions are "
                "taken only by the workflow's own task and the tasks it starts",
            )
        self.tasks.add(task)

    def live(self) -> bool:
        """Whether a branch task (one that took a position) is still running (not while the
        held waits park the instance: that commit is theirs)."""
        return not self._parking and any(not t.done() for t in self.tasks)

    async def park(
        self,
        seq: int | Key,
        name: str,
        pending: list[Write],
        due: float,
        suspend: Callable[[list[Write], float, str], Awaitable[None]],
        *,
        droppable: bool = False,
    ) -> bool:
        """Hold a wait that would park while branches run, until every branch is blocked;
        then park the instance for all of them in one commit and raise ``Waiting``. False
        when no branch runs: the wait parks the instance on its own. ``droppable``: nothing
        of the wait is in flight (a child's result), so cancelling its branch ends it."""
        if self.main is None or (asyncio.current_task() is self.main and not self.live()):
            return False
        key = _key(seq)
        me = asyncio.current_task()
        if droppable and me in self._dropped:
            raise asyncio.CancelledError
        self._held[key] = (name, pending, due)
        if droppable and me is not None:
            self._droppable.add(me)
        self._changed.set()
        try:
            while not await self._all_blocked(in_flight=not droppable):
                self._changed.clear()
                await self._changed.wait()
        except BaseException:
            self._held.pop(key, None)
            raise
        finally:
            # From here on the park is being committed: nothing may cut it short.
            if me is not None:
                self._droppable.discard(me)
        held = [self._held[s] for s in sorted(self._held)]
        writes = [w for _, ws, _ in held for w in ws if not isinstance(w, NoCancelRequest)]
        # The proof that no cancel request stands, once, when a wait starting now asks it (a
        # child's result or a callback's wait does not: each parks as it would alone).
        guard = (
            [NoCancelRequest()]
            if any(isinstance(w, NoCancelRequest) for _, ws, _ in held for w in ws)
            else []
        )
        names = ", ".join(n for n, _, _ in held)
        self._parking = True
        try:
            await suspend([*writes, *guard], min(d for _, _, d in held), names)
        finally:
            self._parking = False
        if self._stop is None or isinstance(self._stop, Cancelled):
            # A cancellation waits for the effects in flight: the run ends WAITING for them,
            # and cancels on a later resumption, once they are settled.
            self._stop = Waiting()
            self._changed.set()
        raise Waiting

    async def _all_blocked(self, *, in_flight: bool) -> bool:
        """Whether no open call's work is running (each is a held wait, or done and waiting
        for its turn) and no branch took a position for a few turns; raises the run's stop.
        ``in_flight``: the wait is an effect's (its effect was dispatched): a cancellation
        does not stop it, the instance waits for the effect's outcome first."""
        self._raise_stop(in_flight=in_flight)
        if self._parking or self._busy():
            return False
        await self._quiet()
        self._raise_stop(in_flight=in_flight)
        return not self._parking and not self._busy()

    def _raise_stop(self, *, in_flight: bool) -> None:
        if self._stop is not None and not (in_flight and isinstance(self._stop, Cancelled)):
            raise self._stop

    def _busy(self) -> bool:
        """Whether an open call is not blocked: its work runs, or it is done and nothing
        called before it is still open (it is about to return, and its branch to go on)."""
        first = min(self._open, default=None)
        return any(s not in self._held and (s not in self._turns or s == first) for s in self._open)

    def stopping(self, control: BaseException) -> None:
        """A call raised a control-flow signal: the executor decides now, and every other
        call raises the same signal instead of returning (nothing new starts meanwhile)."""
        if self._stop is None:
            self._stop = control
            self._changed.set()

    def take(self, seq: int) -> None:
        """A call took position ``seq``: it returns only in its turn."""
        if self.main is not None:
            self._open[(seq, 0)] = asyncio.get_running_loop().create_future()
            self._changed.set()

    def order(self) -> Key:
        """A call that takes no position (a child's result) takes its place in the run's
        order here: it returns after every call made before it, before every later one."""
        seq, n = self._positions(), self._last_order[1]
        key = self._last_order = (seq, n + 1 if self._last_order[0] == seq else 1)
        if self.main is not None:
            self._ordered += 1
            self._open[key] = asyncio.get_running_loop().create_future()
            self._changed.set()
        return key

    @contextlib.contextmanager
    def aside(self, seq: int) -> Iterator[None]:
        """Set the open call at ``seq`` aside while code runs under it (an update handler
        under a wait, runtime/update_handlers.py): the calls that code makes return in their
        own order, not after the wait's."""
        future = self._open.pop((seq, 0), None)
        try:
            yield
        finally:
            if future is not None:
                self._open[(seq, 0)] = future

    async def call(self, seq: int | Key, work: Awaitable[T]) -> T:
        """Run one call's work and hand its outcome back in position order."""
        if self.main is None:
            return await work
        seq = _key(seq)
        try:
            if asyncio.current_task() is self.main:
                value = await work
            else:
                value = await self._shielded(work)
        except asyncio.CancelledError:
            self._returned(seq)
            raise
        except Exception:
            await self._in_turn(seq)
            raise
        except BaseException as stop:
            # A control-flow signal, or the worker's death: no turn to wait for, and nothing
            # left open (a held effect may still wait until every branch is blocked).
            self.stopping(stop)
            self._returned(seq)
            raise
        await self._in_turn(seq)
        return value

    async def _shielded(self, work: Awaitable[T]) -> T:
        """The work in its own task: a cancelled branch lets it end, then is cancelled."""
        task = asyncio.ensure_future(work)
        self._works.add(task)
        task.add_done_callback(self._works.discard)
        task.add_done_callback(self._dropped.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._dropped.add(task)
                if task in self._droppable:
                    task.cancel()  # a held wait with nothing in flight: it ends with its branch
            while not task.done():
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    continue
                except BaseException:  # noqa: BLE001 - read below from the task itself.
                    break
            if not task.cancelled():
                error = task.exception()
                if error is not None and not isinstance(error, Exception):
                    # An engine decision made by the work (a retry's suspension, a park) or
                    # the worker's death outranks the branch's cancellation.
                    raise error from None
            raise

    async def _in_turn(self, seq: Key) -> None:
        """Wait until every lower position returned and the run is quiet, then return."""
        self._turns.add(seq)
        self._changed.set()
        try:
            while True:
                lower = [f for s, f in self._open.items() if s < seq and not f.done()]
                if lower:
                    await asyncio.wait(lower)
                    continue
                if self._stop is not None:
                    raise self._stop
                await self._quiet()
                if not any(s < seq and not f.done() for s, f in self._open.items()):
                    break
        finally:
            self._returned(seq)

    async def _quiet(self) -> None:
        """Let the loop turn until no branch took a position for a few turns in a row (once,
        when the run never had a branch: a task it just created gets to start)."""
        await asyncio.sleep(0)
        if not self.tasks:
            return
        seen, still = self._progress(), 0
        for _ in range(limits.BRANCH_SETTLE_TURNS_MAX):
            if still >= limits.BRANCH_QUIET_TURNS:
                return
            await asyncio.sleep(0)
            now = self._progress()
            seen, still = now, (still + 1 if now == seen else 0)

    def _progress(self) -> int:
        return self._positions() + self._ordered

    def _returned(self, seq: Key) -> None:
        self._turns.discard(seq)
        self._held.pop(seq, None)
        self._changed.set()
        future = self._open.pop(seq, None)
        if future is not None and not future.done():
            future.set_result(None)

    async def close(self, *, hard: bool = False) -> None:
        """End every branch still running before the verdict: each is cancelled, and the
        work of its open call records its outcome first. ``hard`` (the worker died or lost
        the instance): the work is cancelled too, and recovery settles what it left."""
        self._closed = True
        live = [t for t in self.tasks if not t.done()]
        for task in live:
            task.cancel()
        if hard:
            for work in list(self._works):
                work.cancel()
        if live:
            await asyncio.gather(*live, return_exceptions=True)
        for task in self.tasks:
            # Each retrieved (asyncio would log it as never retrieved); a death in a branch
            # is the run's: nothing may be written after it.
            error = None if task.cancelled() else task.exception()
            if error is not None and fatal(error):
                raise error
        if isinstance(self._stop, Waiting):
            # A branch's work that had to end (an asynchronous effect's callback) parked the
            # instance meanwhile: it is WAITING, and nothing else may be written now.
            raise self._stop


def _key(seq: int | Key) -> Key:
    return seq if isinstance(seq, tuple) else (seq, 0)


def fatal(exc: BaseException) -> bool:
    """Whether the run stops without a verdict: the worker died (a crash, an interrupt) or
    its drive was cancelled; nothing more may be written for it."""
    return any(not isinstance(leaf, (Exception, *CONTROL)) for leaf in leaves(exc))


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, depth first; the exception itself otherwise."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def deciding(exc: BaseException, *, business: Callable[[BaseException], bool]) -> BaseException:
    """The one exception the executor acts on when branches ended with ``exc``.

    A control-flow signal wins, the strongest first (:data:`CONTROL`); otherwise the only
    error, or the first of several business failures. Several errors that are not all
    business failures stay the group: a defect of the code."""
    found = leaves(exc)
    for kind in CONTROL:
        for leaf in found:
            if isinstance(leaf, kind):
                return leaf
    errors = [leaf for leaf in found if not isinstance(leaf, asyncio.CancelledError)]
    if len(errors) == 1 or (errors and all(business(e) for e in errors)):
        return errors[0]
    return exc


async def gather(calls: tuple[Awaitable[Any], ...]) -> list[Any]:
    """``ctx.gather``: the calls as a ``TaskGroup``'s tasks, their values in argument order; of
    several failures, a control-flow signal first (it ends the run), else the first in argument
    order (not an exception group)."""
    tasks: list[asyncio.Task[Any]] = []
    try:
        async with asyncio.TaskGroup() as group:
            tasks.extend(group.create_task(_awaited(c)) for c in calls)
    except BaseExceptionGroup as failed:
        decided = deciding(failed, business=lambda _: True)
        if isinstance(decided, CONTROL):
            raise decided from None
        errors = [t.exception() for t in tasks if t.done() and not t.cancelled()]
        first = next((e for e in errors if e is not None), None)
        if first is None:
            raise
        raise first from None
    return [task.result() for task in tasks]


async def _awaited(call: Awaitable[T]) -> T:
    return await call
