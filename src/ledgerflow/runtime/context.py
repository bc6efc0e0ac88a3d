"""The object workflow code receives: journaled steps and effects, replayed deterministically.

Each call to :meth:`WorkflowContext.step` or :meth:`WorkflowContext.effect` takes the next
sequence number. On replay the journal answers: a completed step returns its recorded output
without running again, and a step that does not match what the journal holds at that position
(another kind, name or input) is a divergence, which parks the instance instead of running on.

Positions are taken in the order the code calls, also from parallel branches
(``asyncio.gather``, ``asyncio.TaskGroup``, ``create_task``): :mod:`~ledgerflow.runtime.branches`
hands each call's outcome back in position order, so a replay takes the same positions whatever
order the calls finished in; a call from a task the run did not start is refused and the
instance parks (``concurrent_steps``). :meth:`WorkflowContext.patched` is decided at its
position from the journal, so a replayed run takes the branch it took.
:class:`~ledgerflow.runtime.replay.ReplayContext` is the same context answered from the journal
only (the replay checker).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar, Unpack

from ledgerflow import limits
from ledgerflow.errors import RegistrationError, StepFailedError, UnsettledEffectsError
from ledgerflow.ledger.records import StepRecord
from ledgerflow.model.defects import step_verdict
from ledgerflow.model.definition import (
    EffectDeclaration,
    Registry,
    WorkflowDefinition,
    WorkflowFunction,
)
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import BusinessKey, InstanceId, StepSeq, TenantId
from ledgerflow.model.retry import RetryPolicy
from ledgerflow.model.schedule import ScheduledBy, scheduled_by
from ledgerflow.model.signal import Signal
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime import children, flow, sends
from ledgerflow.runtime.branches import CONTROL, Branches, gather
from ledgerflow.runtime.children import ChildHandle, ChildOptions
from ledgerflow.runtime.control import Cancelled, ContinueAsNew, Diverged, Park
from ledgerflow.runtime.effects import EffectDriver
from ledgerflow.runtime.local_step import LocalStepDriver
from ledgerflow.runtime.locks import DurableLock
from ledgerflow.runtime.session import Session
from ledgerflow.runtime.update_handlers import PublishingCalls, UpdateHandlers
from ledgerflow.runtime.waits import WaitDriver

T = TypeVar("T")

PATCH_PREFIX = "patched:"
# An effect of the run in one of these states is not settled: the run may not continue as new.
UNSETTLED_STATES = frozenset(
    {EffectState.PLANNED, EffectState.INTENDED, EffectState.ACCEPTED, EffectState.UNKNOWN}
)
CHANGE_ID_LENGTH_MAX = 200


def describe_step(kind: StepKind, name: str, input_text: str | None) -> str:
    """One journal position as a person reads it: kind, name and input."""
    return f"{kind.value} {name!r} with input {input_text}"


class WorkflowContext(PublishingCalls):
    """Passed as the first argument of every workflow function.

    Example::

        @registry.workflow(name="order", version=1)
        async def order(ctx: WorkflowContext, order: dict) -> dict:
            total = await ctx.step("price", price_of, order["items"])
            receipt = await ctx.effect(charge, {"amount": total})
            return {"receipt": receipt}
    """

    def __init__(
        self,
        session: Session,
        definition: WorkflowDefinition,
        *,
        registry: Registry | None = None,
    ) -> None:
        self._session = session
        self._definition = definition
        # The definitions a detached start (``start_workflow``) may pin (None: it starts none).
        self._registry = registry
        self._seq = 0
        # Each change id's answer in this run, decided at its first ``patched`` call.
        self._patches: dict[str, bool] = {}
        # Children started with on_parent_end="wait": their endings come before the parent's.
        self._children_awaited: list[ChildHandle] = []
        # The run's branches: who may take positions, and in what order calls return.
        self._branches = Branches(lambda: self._seq)
        session.branches_live = self._branches.live
        self._updates = UpdateHandlers(self)

    @property
    def instance_id(self) -> InstanceId:
        """The id of the instance this code runs for."""
        return self._session.instance_id

    @property
    def business_key(self) -> BusinessKey:
        """The business key the instance was started under."""
        return self._session.instance.business_key

    @property
    def tenant(self) -> TenantId:
        """The tenant the instance belongs to."""
        return self._session.instance.tenant

    @property
    def scheduled(self) -> ScheduledBy | None:
        """The schedule slot (or manual trigger) that started this instance, else None."""
        return scheduled_by(self._session.instance.business_key)

    @property
    def steps_taken(self) -> int:
        """How many journal positions the code has taken so far in this run."""
        return self._seq

    def _in_program_order(self, what: str) -> None:
        """Refuse a call from a task this run did not start (see runtime/branches.py)."""
        self._branches.admit(what)

    async def close_branches(self, *, hard: bool = False) -> None:
        """End the branches still running before the run's verdict is written (the
        executor's and the replay checker's, never workflow code's)."""
        await self._branches.close(hard=hard)

    def _checked(self, what: str, check: Callable[[], T]) -> T:
        """The checks of a call before its work (its position, the journal, a cancel
        request): a control-flow signal among them ends the run for every branch."""
        try:
            self._in_program_order(what)
            return check()
        except CONTROL as control:
            self._branches.stopping(control)
            raise

    def _next_seq(self) -> StepSeq:
        self._seq += 1
        if self._seq > limits.STEPS_PER_INSTANCE_MAX:
            raise Park(
                "step_limit",
                f"the instance passed {limits.STEPS_PER_INSTANCE_MAX} steps",
            )
        return StepSeq(self._seq)

    def _replayed(
        self, seq: StepSeq, *, kind: StepKind, name: str, input_text: str | None
    ) -> StepRecord | None:
        recorded = self._session.step(seq)
        if recorded is None:
            return None
        if not self._same_position(recorded, kind=kind, name=name, input_text=input_text):
            holds = describe_step(recorded.kind, recorded.name, recorded.input)
            asks = describe_step(kind, name, input_text)
            raise Diverged(
                seq,
                holds=holds,
                asks=asks,
                reason=f"step {seq}: the journal holds {holds}, the code now asks for {asks}",
            )
        return recorded

    def _same_position(
        self, recorded: StepRecord, *, kind: StepKind, name: str, input_text: str | None
    ) -> bool:
        """Whether the code asks for what the journal holds at a position: the same kind, name
        and input. A timer's length and a wait's timeout are not part of it: once started, a
        timer or a wait is due when its journal says (``next_attempt_at``), so code that now
        sleeps or waits for another length resumes a started one as recorded and applies the
        new length to those it starts."""
        if recorded.kind is not kind or recorded.name != name:
            return False
        if kind is StepKind.TIMER:
            return True
        if kind in (StepKind.WAIT, StepKind.LOCK):
            return bool(self._without_timeout(recorded.input) == self._without_timeout(input_text))
        return recorded.input == input_text

    def _without_timeout(self, text: str | None) -> Any:
        spec = self._session.codec.decode(text or "{}")
        return {k: v for k, v in spec.items() if k != "timeout"} if isinstance(spec, dict) else spec

    def _stop_if_cancelled(self, seq: StepSeq, name: str, recorded: StepRecord | None) -> None:
        """Cancellation takes effect before new work only: what was started is finished."""
        if self._session.cancel_requested and recorded is None:
            raise Cancelled(f"step {seq} ({name}) was not started")

    async def step(
        self,
        name: str,
        function: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        checkpoint: bool = False,
    ) -> Any:
        """Run a local computation once and journal its result.

        The arguments are the step's input snapshot and must be JSON values. The function runs
        at least once (again after a crash before its result was journaled); its result is
        journaled exactly once and returned on every replay. Side effects on other services
        belong in :meth:`effect`, not here.

        The result is journaled with the instance's next commit (the next step, an effect's
        intent, a wait, the ending), at most ``limits.RIDING_STEPS_MAX`` results and
        ``limits.RIDING_STEP_SECONDS_MAX`` later; ``checkpoint=True`` journals it at once, for
        a step whose rerun after a crash costs more than a commit."""
        session = self._session
        input_text = session.codec.encode(list(args))

        def check() -> tuple[StepSeq, StepRecord | None]:
            seq = self._next_seq()
            recorded = self._replayed(seq, kind=StepKind.LOCAL, name=name, input_text=input_text)
            self._stop_if_cancelled(seq, name, recorded)
            return seq, recorded

        seq, recorded = self._checked(f"step {name!r}", check)
        self._branches.take(seq)
        work = self._step(seq, name, function, args, input_text, recorded, retry, checkpoint)
        return await self._branches.call(seq, work)

    async def _step(
        self,
        seq: StepSeq,
        name: str,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        input_text: str,
        recorded: StepRecord | None,
        retry: RetryPolicy | None,
        checkpoint: bool,
    ) -> Any:
        session = self._session
        policy = retry or self._definition.step_retry
        attempt = 1
        if recorded is not None:
            if recorded.status is StepStatus.COMPLETED:
                return session.codec.decode(recorded.output or "null")
            if recorded.status is StepStatus.FAILED:
                raise StepFailedError(
                    f"step {name!r} failed: {recorded.error}",
                    instance_id=session.instance_id,
                    seq=seq,
                    business=step_verdict(session.codec.decode(recorded.error or "null")),
                )
            attempt = recorded.attempt
            await self.wait_until(recorded.next_attempt_at)
        driver = LocalStepDriver(
            session=session,
            seq=seq,
            name=name,
            input_text=input_text,
            policy=policy,
            wait_until=self.wait_until,
            business=self._definition.is_business_failure,
            checkpoint=checkpoint,
        )
        with session.traced(f"ledgerflow.step {name}", step=seq, step_name=name, attempt=attempt):
            return await driver.run(function, args, attempt=attempt)

    async def effect(
        self, declaration: EffectDeclaration, payload: Any = None, *, name: str | None = None,
        priority: int | None = None,
    ) -> Any:  # fmt: skip
        """Apply an effect at a participant through the effect protocol; return its evidence.

        The intent (with an idempotency key derived from the instance, run and step) is durable
        before the participant is called. ``priority`` (1 lowest to 5 highest; default the
        declaration's) orders it among the waiters of a flow-control limit. Raises
        :class:`~ledgerflow.errors.EffectFailedError` when the participant proved the effect
        was not applied and no attempt is left."""
        session = self._session
        step_name = name or f"{declaration.participant.name}.{declaration.operation}"
        payload_text = session.codec.encode(payload)

        def check() -> StepSeq:
            seq = self._next_seq()
            recorded = self._replayed(
                seq, kind=StepKind.EFFECT, name=step_name, input_text=payload_text
            )
            self._stop_if_cancelled(seq, step_name, recorded)
            return seq

        seq = self._checked(f"effect {step_name!r}", check)
        self._branches.take(seq)
        driver = EffectDriver(
            session=session,
            declaration=declaration,
            seq=seq,
            name=step_name,
            payload_text=payload_text,
            wait_until=self.wait_until,
        )
        driver.parks, driver.priority = self._branches.park, flow.priority(declaration, priority)
        return await self._branches.call(seq, driver.run())

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: the instance is released and woken by its timer, on any worker,
        after any restart."""
        await self._timer("sleep", {"seconds": seconds}, self._session.clock.now() + seconds)

    async def sleep_until(self, at: float) -> None:
        """Sleep durably until ``at`` (seconds since the epoch)."""
        await self._timer("sleep_until", {"until": at}, at)

    async def _timer(self, name: str, spec: dict[str, Any], due: float) -> None:
        driver = self._wait_driver(StepKind.TIMER, name, spec)
        with self._wait_span(driver):
            await self._branches.call(driver.seq, driver.sleep(due))

    async def wait_for(self, event: str, *, timeout: float | None = None) -> Signal:
        """Wait for an event named ``event`` (delivered with ``Engine.signal``, the CLI or the
        HTTP endpoint), durably: the instance holds nothing meanwhile. An event that arrived
        before the wait is taken. Raises :class:`~ledgerflow.errors.WaitTimeoutError` when
        ``timeout`` seconds pass first; exactly one of the two wins."""
        return await self._wait(event, timeout=timeout, approvers=())

    async def wait_for_approval(
        self, event: str, *, approvers: Sequence[str], timeout: float | None = None
    ) -> Signal:
        """Wait for a decision from one of ``approvers``: an event from anyone else is refused
        and recorded, never taken. The returned signal names the approver (``sender``)."""
        if not approvers:
            raise RegistrationError(f"approval {event!r} names no approver")
        return await self._wait(event, timeout=timeout, approvers=tuple(sorted(approvers)))

    async def _wait(
        self, event: str, *, timeout: float | None, approvers: tuple[str, ...]
    ) -> Signal:
        spec = {"event": event, "timeout": timeout, "approvers": list(approvers)}
        driver = self._wait_driver(StepKind.WAIT, f"wait:{event}", spec)
        due = self._session.clock.now() + timeout if timeout is not None else limits.WAIT_FOREVER_AT
        with self._wait_span(driver):
            return await self._branches.call(driver.seq, driver.wait_for(event, due, approvers))

    def lock(self, name: str, *, timeout: float | None = None) -> DurableLock:
        """A durable named lock, held by one instance of the tenant at a time::

            async with ctx.lock("account:42", timeout=None):
                balance = await ctx.effect(read_balance, {"account": 42})
                await ctx.wait_for("approved")  # still held: across waits and crashes
                await ctx.effect(debit, {"account": 42, "amount": 10})

        Acquiring takes a journal position: granted at once if the lock is free, else the
        instance queues (first come, first served) and waits holding nothing else. The release
        (leaving the block, or a final ending of the instance) hands the lock to the first
        waiter in the same transaction. Raises :class:`~ledgerflow.errors.LockTimeoutError`
        when ``timeout`` seconds pass before the grant (the instance leaves the queue).
        See :mod:`ledgerflow.runtime.locks`."""
        return DurableLock(self, name, timeout=timeout)

    def _wait_driver(self, kind: StepKind, name: str, spec: dict[str, Any]) -> WaitDriver:
        """The driver of the wait or timer at the next position, checked against the journal
        (a different step there is a divergence, a cancel request stops the run here)."""
        input_text = self._session.codec.encode(spec)

        def check() -> tuple[StepSeq, StepRecord | None]:
            self._updates.refuse_wait(name)
            seq = self._next_seq()
            recorded = self._replayed(seq, kind=kind, name=name, input_text=input_text)
            self._stop_if_cancelled(seq, name, recorded)
            return seq, recorded

        seq, recorded = self._checked(name, check)
        self._branches.take(seq)
        return WaitDriver(
            updates=self._updates,
            session=self._session,
            seq=seq,
            kind=kind,
            name=name,
            input_text=input_text,
            recorded=recorded,
            parks=self._branches.park,
        )

    def _wait_span(self, driver: WaitDriver) -> contextlib.AbstractContextManager[None]:
        """A span for a wait or timer this session is waiting on (none for one the journal
        already has the answer of)."""
        recorded = driver.recorded
        if recorded is not None and recorded.status is StepStatus.COMPLETED:
            return contextlib.nullcontext()
        return self._session.traced(
            f"ledgerflow.wait {driver.name}", step=driver.seq, step_name=driver.name
        )

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the patched branch of a change to the workflow's code.

        A new run (or one that reaches this point for the first time) gets True, and a marker
        is journaled at this position; a run journaled before the change, whose journal holds
        something else here, gets False and the position stays the old code's. A change id is
        decided once per run, at its first call: every later call of the same id in the run
        gets the same answer (a run moved to new code while it waited, which took the old
        branch before the wait, takes it after the wait too, never half of the patch). A
        marker the journal holds where a later call stands is followed all the same: the
        journal is what the run did.

        Example::

            if ctx.patched("fee-before-charge"):
                fee = await ctx.step("fee", fee_of, order)
            receipt = await ctx.effect(charge, {"amount": total})
        """
        if not isinstance(change_id, str) or not 0 < len(change_id) <= CHANGE_ID_LENGTH_MAX:
            raise RegistrationError(
                f"a change id is a text of 1 to {CHANGE_ID_LENGTH_MAX} characters, got "
                f"{change_id!r}"
            )
        self._in_program_order(f"patched({change_id!r})")
        name = PATCH_PREFIX + change_id
        at = StepSeq(self._seq + 1)
        recorded = self._session.step(at)
        if recorded is not None and recorded.kind is StepKind.MARKER and recorded.name == name:
            self._next_seq()
            self._patches.setdefault(change_id, True)
            return True
        decided = self._patches.get(change_id)
        if decided is not None:
            return decided
        self._patches[change_id] = self._patch(at, name, recorded)
        return self._patches[change_id]

    def _patch(self, at: StepSeq, name: str, recorded: StepRecord | None) -> bool:
        """The first decision of a change id in this run, at position ``at``."""
        if recorded is None:
            if not self._patch_at_frontier(at, name):
                return False
            seq = self._next_seq()
            self._session.ride_marker(seq, name, input=None, output="true")
            return True
        return False

    def _patch_at_frontier(self, seq: StepSeq, name: str) -> bool:
        """The answer past the end of the journal: a live run takes the patched branch."""
        return True

    async def wait_until(self, due: float | None) -> None:
        """Pause until ``due``: in the worker when short, else released with a durable wake-up."""
        await self._session.wait_until(due)

    @property
    def run(self) -> int:
        """The number of the run this code runs as: 1, then one more at each
        :meth:`continue_as_new`."""
        return self._session.instance.run

    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this run and start the next run of the same instance with ``input``.

        The switch is one transaction: run N closes, run N+1 opens with an empty journal, and
        every event no wait has taken moves to it. The instance keeps its id, business key,
        inbox (an event id delivered in any run is a duplicate in every later one) and its
        obligations: an effect committed in an earlier run is still compensated if a later run
        fails or is cancelled. Keys of later runs never meet earlier ones (each names its run).
        Refused with :class:`~ledgerflow.errors.UnsettledEffectsError` while an effect of this
        run is not settled. It does not return.

        Example (a loop whose journal stays bounded however long it runs)::

            @registry.workflow(name="counter", version=1)
            async def counter(ctx: WorkflowContext, total: int) -> int:
                for _ in range(100):
                    event = await ctx.wait_for("add")
                    total += event.payload
                ctx.continue_as_new(total)
        """
        self._in_program_order("continue_as_new")
        unsettled = [
            e for e in self._session.journal.effects.values() if e.state in UNSETTLED_STATES
        ]
        if unsettled:
            raise UnsettledEffectsError(
                f"run {self.run} may not continue as new: {len(unsettled)} of its effects are "
                "not settled (intended, dispatched or in doubt)",
                machine="run",
                state="OPEN",
                event="continue-as-new",
                instance_id=self.instance_id,
                run=self.run,
                unsettled=len(unsettled),
            )
        raise ContinueAsNew(self._session.codec.encode(input))

    # -- child workflows (runtime/children.py) ------------------------------------------------

    async def start_child(
        self, workflow: str | WorkflowFunction, input: Any = None, **options: Unpack[ChildOptions]
    ) -> ChildHandle:
        """Start a child workflow at the next position and return its handle at once.

        The parent's step, the child's instance (linked to this run and position) and the proof
        that no cancel request stands on the parent are one transaction; a replay returns the
        same child without starting it again. ``key`` defaults to one derived from this
        instance's key, run and position; an explicit key another instance holds raises
        :class:`~ledgerflow.errors.ChildKeyConflictError`. ``on_parent_end`` says what this
        instance's own ending does to the child if it is still live: ``"cancel"`` (a durable
        cancel request, the default), ``"abandon"`` (nothing) or ``"wait"`` (the parent's
        ending waits for the child's). ``version`` pins the child's workflow version.
        ``compensate_with`` names a workflow that undoes a child that SUCCEEDED, should this
        instance's saga compensate later; it receives ``compensation_input``, by default
        ``{"input": ..., "result": ...}`` of the child (runtime/child_compensations.py).

        Example::

            handles = [await ctx.start_child(ship, p) for p in order["parcels"]]
            receipts = [await h.result() for h in handles]
        """
        return await children.start_child(self, workflow, input, **options)

    async def child(
        self, workflow: str | WorkflowFunction, input: Any = None, **options: Unpack[ChildOptions]
    ) -> Any:
        """Start a child workflow and wait for its result (the options of :meth:`start_child`);
        a child that did not succeed raises the :class:`~ledgerflow.errors.ChildWorkflowError`
        its ending names, with its status, cause and residual effects.

        Example::

            receipt = await ctx.child(charge_card, {"amount": total}, compensate_with=refund)
        """
        return await (await self.start_child(workflow, input, **options)).result()

    def _child_unsettled(self, seq: StepSeq) -> None:
        """A child's ending is about to be read from the inbox (the replay checker stops)."""

    async def signal_instance(
        self, target: str | tuple[str, str], name: str, payload: Any = None
    ) -> str:
        """Send the event ``name`` to another instance of this instance's tenant -- by its id,
        or by ``(workflow, business key)`` -- exactly once, in the transaction that
        journals this position; return the event's id (derived from this instance, run and
        position). A replay returns it without sending again. No such instance:
        :class:`~ledgerflow.errors.TargetNotFoundError`, recorded as this step's failure.

        Example::

            await ctx.signal_instance(("shipment", order["id"]), "paid", {"amount": 30})
        """
        return await sends.signal_instance(self, target, name, payload)

    async def start_workflow(
        self,
        workflow: str,
        input: Any = None,
        *,
        key: str | None = None,
        version: int | None = None,
        start_in: float | None = None,
        if_running: str = "return",
        if_ended: str = "return",
    ) -> InstanceId:
        """Start another workflow, detached (not a child: it lives on whatever this instance
        does), in the transaction that journals this position; return its instance id. The
        key defaults to one derived from this instance, run and position. Options as
        :meth:`Engine.start <ledgerflow.Engine.start>`'s (``start_in`` counts from the send);
        a key whose instance this start may not return raises
        :class:`~ledgerflow.errors.KeyInUseError`, recorded as this step's failure. A replay
        returns the recorded id without starting again.
        """
        return await sends.start_workflow(
            self, workflow, input, key=key, version=version, start_in=start_in,
            if_running=if_running, if_ended=if_ended,
        )  # fmt: skip

    async def gather(self, *calls: Awaitable[Any]) -> list[Any]:
        """Run steps and effects as parallel branches; their values in argument order.

        The same as ``asyncio.TaskGroup``: a failing branch cancels the others (a dispatched
        effect still records its outcome first) and the first failure, in argument order, is
        raised. Positions are taken in argument order, whatever order the branches finish in.

        Example::

            hotel, car = await ctx.gather(
                ctx.effect(book_hotel, trip), ctx.effect(book_car, trip)
            )
        """
        return await gather(calls)
