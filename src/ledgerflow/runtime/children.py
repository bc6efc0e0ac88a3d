"""Child workflows: a parent starts another instance at one of its journal positions and takes
its ending there (internal; the API is :meth:`WorkflowContext.child` and
:meth:`WorkflowContext.start_child`).

The start is one transaction: the parent's CHILD step (STARTED, its input naming the child's
workflow, key, input and parent-end policy), the child's instance with its link to the parent
(run, position), and a check that no cancel request stands on the parent, so a cancel cascade
cannot miss a child started concurrently. The child's id is derived from its business key,
which defaults to one derived from the parent's key, run and position: a replay, a second
worker or a retried start name the same child, and the store starts it once. An explicit key
that another instance holds refuses the whole transaction
(:class:`~ledgerflow.errors.ChildKeyConflictError`).

The child's ending reaches the parent as an inbox event written in the child's ending
transaction (:mod:`ledgerflow.runtime.child_endings`); :meth:`ChildHandle.result` takes it as
a wait takes a signal, closing the CHILD step COMPLETED with the child's outcome in the same
commit, so a replay answers from the journal. While no ending is there the parent is WAITING
(no lease, no memory), woken by the event.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, TypeVar

from ledgerflow import limits
from ledgerflow.errors import (
    ChildCancelledError,
    ChildCompensatedError,
    ChildFailedError,
    ChildForwardRecoveryRequiredError,
    ChildNeedsInterventionError,
    ChildWorkflowError,
    RegistrationError,
)
from ledgerflow.ledger.children import child_event_name
from ledgerflow.ledger.records import (
    ConsumeDelivery,
    NewInstance,
    NoCancelRequest,
    StartInstance,
    StepRecord,
    StepWrite,
    Write,
)
from ledgerflow.ledger.transitions import instance_change, new_step, step_change
from ledgerflow.model import names
from ledgerflow.model.definition import Registry, WorkflowDefinition, WorkflowFunction
from ledgerflow.model.ids import BusinessKey, InstanceId, RunNumber, StepSeq
from ledgerflow.model.instance import InstanceEvent
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.step import StepEvent, StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.branches import Branches, Key
from ledgerflow.runtime.control import Cancelled, Park, Waiting
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.session import Session

# What becomes of a live child when its parent ends (SUCCEEDED, FAILED, COMPENSATED or
# CANCELLED): a durable cancel request, nothing, or the parent's result waits for it.
OnParentEnd = Literal["cancel", "abandon", "wait"]
ON_PARENT_END = ("cancel", "abandon", "wait")

T = TypeVar("T")


class ChildOptions(TypedDict, total=False):
    """The options of :meth:`WorkflowContext.start_child` and :meth:`WorkflowContext.child`."""

    key: str | None
    version: int | None
    on_parent_end: OnParentEnd
    # A workflow that undoes the child once it SUCCEEDED, when the parent's saga compensates
    # (runtime/child_compensations.py), and what it receives (default: the child's input and
    # result).
    compensate_with: str | WorkflowFunction | None
    compensation_input: Any


class ParentContext(Protocol):
    """What a child's start and wait take of the parent's
    :class:`~ledgerflow.runtime.context.WorkflowContext` (declared here so that the context
    may call this module without the two importing each other)."""

    _session: Session
    _definition: WorkflowDefinition
    _children_awaited: list[ChildHandle]

    @property
    def instance_id(self) -> InstanceId: ...

    _branches: Branches

    def _checked(self, what: str, check: Callable[[], T]) -> T: ...

    def _next_seq(self) -> StepSeq: ...

    def _replayed(
        self, seq: StepSeq, *, kind: StepKind, name: str, input_text: str | None
    ) -> StepRecord | None: ...

    def _stop_if_cancelled(self, seq: StepSeq, name: str, recorded: StepRecord | None) -> None: ...

    def _child_unsettled(self, seq: StepSeq) -> None: ...


# The error a child's ending other than SUCCEEDED raises into its parent.
_ERRORS: dict[str, type[ChildWorkflowError]] = {
    "FAILED": ChildFailedError,
    "COMPENSATED": ChildCompensatedError,
    "CANCELLED": ChildCancelledError,
    "MANUAL_INTERVENTION": ChildNeedsInterventionError,
    "FORWARD_RECOVERY_REQUIRED": ChildForwardRecoveryRequiredError,
}


def default_child_key(parent_key: str, parent_id: str, run: int, seq: int) -> str:
    """The key of the child at a parent's position: the parent's key (its id when the key is
    too long to carry the suffix), run and position."""
    suffix = f"/r{run}/s{seq}/child"
    fits = len(parent_key) + len(suffix) <= limits.BUSINESS_KEY_LENGTH_MAX
    return (parent_key if fits else parent_id) + suffix


@dataclass(slots=True, kw_only=True)
class ChildHandle:
    """A child workflow a parent started (``await ctx.start_child(...)``): ``child_id`` names
    it at once; ``await handle.result()`` takes its ending, as many times as asked (the first
    answer is journaled at the parent's position, every later one is read from it).

    Example::

        handles = [await ctx.start_child(ship, parcel) for parcel in order["parcels"]]
        receipts = [await h.result() for h in handles]
    """

    child_id: InstanceId
    key: BusinessKey
    seq: StepSeq
    on_parent_end: OnParentEnd
    _ctx: ParentContext = field(repr=False)

    async def result(self) -> Any:
        """The child's result; or the :class:`~ledgerflow.errors.ChildWorkflowError` subclass
        its ending names (FAILED, COMPENSATED, CANCELLED, MANUAL_INTERVENTION,
        FORWARD_RECOVERY_REQUIRED), with its status, cause and residual effects.

        Inside parallel branches it is a call in the run's order (runtime/branches.py): it
        returns after every call made before it, and while the ending is not there it is held
        as a wait until every branch is blocked (one park for all of them)."""
        ctx = self._ctx
        key = ctx._checked(f"the result of child {self.key!r}", ctx._branches.order)

        async def taken() -> Any:
            return _outcome(self, await _take(self, order=key))

        return await ctx._branches.call(key, taken())


def _outcome(handle: ChildHandle, outcome: dict[str, Any]) -> Any:
    status = outcome["status"]
    if status == "SUCCEEDED":
        return outcome.get("result")
    error = _ERRORS.get(status, ChildWorkflowError)
    raise error(
        f"child {handle.child_id} ({handle.key}) ended {status}: "
        f"{outcome.get('reason_code') or ''} {outcome.get('cause') or ''}".strip(),
        instance_id=handle._ctx.instance_id,
        seq=handle.seq,
        child_id=handle.child_id,
        status=status,
        reason_code=outcome.get("reason_code"),
        cause=outcome.get("cause"),
        residual=tuple(outcome.get("residual") or ()),
    )


def _resolve(ctx: ParentContext, workflow: str | WorkflowFunction) -> tuple[Registry | None, str]:
    """The registry that knows the child's workflow, and its registered name."""
    if isinstance(workflow, str):
        known = getattr(ctx._definition.function, "__ledgerflow__", None)
        return (known[0][0] if known else None), workflow
    known = getattr(workflow, "__ledgerflow__", None)
    if not known:
        raise RegistrationError(
            f"{getattr(workflow, '__name__', workflow)!r} is not a registered workflow: a child "
            "is a workflow of the registry (Registry.workflow), named or given as its function"
        )
    registry, name, _ = known[0]
    return registry, name


async def start_child(
    ctx: ParentContext,
    workflow: str | WorkflowFunction,
    input: Any = None,
    *,
    key: str | None = None,
    version: int | None = None,
    on_parent_end: OnParentEnd = "cancel",
    compensate_with: str | WorkflowFunction | None = None,
    compensation_input: Any = None,
) -> ChildHandle:
    """Start a child at the parent's next position (see :meth:`WorkflowContext.start_child`)."""
    if on_parent_end not in ON_PARENT_END:
        raise RegistrationError(
            f"on_parent_end is one of {', '.join(ON_PARENT_END)}, not {on_parent_end!r}"
        )
    session = ctx._session
    registry, name = _resolve(ctx, workflow)
    parent = session.instance
    step_name = f"child:{name}"

    def check() -> tuple[StepSeq, dict[str, Any], str, StepRecord | None]:
        seq = ctx._next_seq()
        child_key = names.business_key(
            key
            if key is not None
            else default_child_key(parent.business_key, parent.instance_id, parent.run, seq)
        )
        # The child's id is derived from its key, as any start's (the same on every replay).
        spec = {
            "workflow": name,
            "version": version,
            "key": child_key,
            "child_id": instance_id_for(parent.tenant, name, child_key),
            "input": input,
            "on_parent_end": on_parent_end,
        }
        if compensate_with is not None:
            # Kept only when given, so journals of children without one read as before.
            spec["compensate_with"] = _resolve(ctx, compensate_with)[1]
            if compensation_input is not None:
                spec["compensation_input"] = compensation_input
        input_text = session.codec.encode(spec)
        recorded = ctx._replayed(seq, kind=StepKind.CHILD, name=step_name, input_text=input_text)
        ctx._stop_if_cancelled(seq, step_name, recorded)
        return seq, spec, input_text, recorded

    seq, spec, input_text, recorded = ctx._checked(f"child {name!r}", check)
    ctx._branches.take(seq)
    handle = ChildHandle(
        child_id=spec["child_id"],
        key=spec["key"],
        seq=seq,
        on_parent_end=on_parent_end,
        _ctx=ctx,
    )

    async def begin() -> ChildHandle:
        if recorded is None:
            if registry is None:
                raise RegistrationError(f"no registry knows the child workflow {name!r}")
            await _start(ctx, handle, registry.get(name, version), spec, step_name, input_text)
        if on_parent_end == "wait":
            ctx._children_awaited.append(handle)
        return handle

    # Handed back in position order among parallel branches (runtime/branches.py).
    return await ctx._branches.call(seq, begin())


async def _start(
    ctx: ParentContext,
    handle: ChildHandle,
    definition: WorkflowDefinition,
    spec: dict[str, Any],
    step_name: str,
    input_text: str,
) -> None:
    session = ctx._session
    parent = session.instance
    open_children = sum(
        1
        for s in session.journal.steps.values()
        if s.kind is StepKind.CHILD and s.status is StepStatus.STARTED
    )
    if open_children >= limits.CHILDREN_OPEN_MAX:
        raise Park(
            "child_limit",
            f"step {handle.seq} would start child {handle.key!r}, but {open_children} children "
            f"this run started have not been awaited yet (at most {limits.CHILDREN_OPEN_MAX}): "
            "await some (handle.result()) before starting more",
        )
    new = NewInstance(
        instance_id=handle.child_id,
        tenant=parent.tenant,
        workflow_name=definition.name,
        workflow_version=definition.version,
        fingerprint=definition.fingerprint,
        business_key=handle.key,
        input=session.codec.encode(spec["input"]),
        parent_instance_id=parent.instance_id,
        parent_run=RunNumber(parent.run),
        parent_seq=handle.seq,
        on_parent_end=handle.on_parent_end,
    )
    step = new_step(
        parent,
        handle.seq,
        StepEvent.START,
        kind=StepKind.CHILD,
        name=step_name,
        input=input_text,
        retry_policy=session.codec.encode(DEFAULT_STEP_RETRY.to_record()),
        now=session.clock.now(),
        detail=f"child {handle.child_id}",
    )
    if faults.plan is not None:
        faults.point("child.before_start", instance=parent.business_key, seq=handle.seq)
    # The parent's step, the child and its link, and the proof that no cancel request stands on
    # the parent: one transaction (a key held by another instance refuses all of it).
    await session.commit(step, NoCancelRequest(), StartInstance(new=new))
    if faults.plan is not None:
        faults.point("child.after_start", instance=parent.business_key, seq=handle.seq)


async def _take(
    handle: ChildHandle, *, cancellable: bool = True, order: Key | None = None
) -> dict[str, Any]:
    """The child's outcome: from the journal, or taken from the inbox (closing the step).
    ``cancellable=False``: a parent whose ending is decided waits whatever is asked of it.
    ``order``: the call's place in the run's order, under which parallel branches hold the
    wait until every branch is blocked (none: the parent parks on its own)."""
    ctx = handle._ctx
    session = ctx._session
    recorded = session.step(handle.seq)
    assert recorded is not None, "a child's handle exists only once its step is journaled"
    if recorded.status is StepStatus.COMPLETED:
        return _decoded(session, recorded.output)
    ctx._child_unsettled(handle.seq)
    name = child_event_name(handle.child_id)
    while True:
        # A cancel request on the parent wins over taking a child's ending (which its own
        # cascade may have caused): the parent cancels; the ending stays kept in its inbox.
        if cancellable and session.cancel_requested:
            raise Cancelled(f"step {handle.seq} stopped waiting for child {handle.child_id}")
        for delivery in await session.store.pending_deliveries(session.instance_id, name):
            outcome: dict[str, Any] = json.loads(delivery.payload)
            # The child's result as its codec wrote it, decoded by the parent's (one engine).
            result_text = outcome.pop("result_text", None)
            outcome["result"] = None if result_text is None else session.codec.decode(result_text)
            if faults.plan is not None:
                faults.point(
                    "child.before_take", instance=session.instance.business_key, seq=handle.seq
                )
            await session.commit(
                ConsumeDelivery(event_id=delivery.event_id, seq=handle.seq),
                _close(session, recorded, outcome),
            )
            return outcome
        # Between the inbox read and this park, an ending that arrives makes the park due at
        # once (the store's arrival flag), so it is never missed.
        if faults.plan is not None:
            faults.point(
                "wait.before_suspend", instance=session.instance.business_key, seq=handle.seq
            )
        what = f"step {handle.seq} (child {handle.child_id})"
        if order is not None and await ctx._branches.park(
            order, what, [], limits.WAIT_FOREVER_AT, _suspender(session), droppable=True
        ):
            raise Waiting  # never reached: park raises it once the instance is WAITING
        await _suspender(session)([], limits.WAIT_FOREVER_AT, what)
        raise Waiting


def _suspender(session: Session) -> Callable[[list[Write], float, str], Awaitable[None]]:
    """How a child's wait parks the parent: WAITING until ``due``, with the held writes."""

    async def suspend(writes: list[Write], due: float, reason: str) -> None:
        await session.commit(
            *writes,
            instance_change(
                session.status,
                InstanceEvent.SUSPEND,
                reason_code="waiting",
                reason=reason,
                release=True,
                available_at=due,
            ),
        )

    return suspend


def _close(session: Session, recorded: StepRecord, outcome: dict[str, Any]) -> StepWrite:
    current = session.step(recorded.seq) or recorded
    return step_change(
        current,
        StepEvent.COMPLETE,
        now=session.clock.now(),
        generation=session.generation,
        output=session.codec.encode(outcome),
        next_attempt_at=None,
        detail=f"child {outcome.get('child_id')} {outcome['status']}",
    )


def _decoded(session: Session, text: str | None) -> dict[str, Any]:
    outcome = session.codec.decode(text or "{}")
    assert isinstance(outcome, dict), "a child step's output is its outcome record"
    return dict(outcome)


async def await_children(ctx: ParentContext, *, cancellable: bool = True) -> None:
    """Before a parent's own ending is recorded: take the ending of each child it started with
    ``on_parent_end="wait"`` (a failed child's error is the parent's to catch at ``result()``;
    here it only waits). ``cancellable=False`` once the ending is decided (a failure, a
    cancellation): a cancel request then no longer stops the wait."""
    for handle in ctx._children_awaited:
        await _take(handle, cancellable=cancellable)
