"""Drives one claimed instance from its journal to its next resting point (internal).

Finds the definition the instance is pinned to, replays the workflow function against the
journal, and records the verdict: a terminal state, a suspension with a durable wake-up time,
or MANUAL_INTERVENTION with the reason, or (``ctx.continue_as_new``) the switch to the next
run, which it then drives under the same claim from an empty journal. Nothing is guessed. The
claim routes by capability, so a worker only ever holds instances pinned to a definition it
has (same workflow, version and fingerprint); should a store hand it another all the same, it
gives the lease back untouched rather than run or park work it lacks the code for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import traceback
from typing import TYPE_CHECKING

from ledgerflow import limits
from ledgerflow.errors import (
    PayloadError,
    StepFailedError,
    UnknownVersionError,
    UnknownWorkflowError,
)
from ledgerflow.ledger.records import (
    ContinueRun,
    EffectRecord,
    InstanceRecord,
    Journal,
    NoCancelRequest,
    Release,
)
from ledgerflow.ledger.transitions import instance_change
from ledgerflow.model.classification import Classification
from ledgerflow.model.defects import DEFECT_RETRY, WOKEN, WORKFLOW_DEFECT, defect_streak
from ledgerflow.model.definition import Registry, WorkflowDefinition
from ledgerflow.model.detection import DEFAULT_BOUNDS, DetectionBounds
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId, RunNumber, WorkerId
from ledgerflow.model.instance import InstanceEvent, InstanceStatus, failure_event
from ledgerflow.runtime import children, faults, journal_log
from ledgerflow.runtime.branches import deciding, fatal
from ledgerflow.runtime.calls import describe_error, error_names
from ledgerflow.runtime.compensations import CompensationRunner
from ledgerflow.runtime.context import WorkflowContext
from ledgerflow.runtime.control import (
    Abandon,
    Cancelled,
    ContinueAsNew,
    LostOwnership,
    Park,
    Suspend,
    Waiting,
)
from ledgerflow.runtime.flow import FlowGate
from ledgerflow.runtime.seams import Runtime
from ledgerflow.runtime.session import Session

if TYPE_CHECKING:
    # Imported only by an engine made with tracing (the otel extra).
    pass

log = logging.getLogger("ledgerflow.executor")


class Executor:
    def __init__(
        self,
        *,
        runtime: Runtime,
        registry: Registry,
        owner: WorkerId,
        detection: DetectionBounds = DEFAULT_BOUNDS,
    ) -> None:
        self.runtime = runtime
        self.detection = detection
        self.metrics = runtime.metrics
        self.tracing = runtime.tracing
        self.registry = registry
        self.store = runtime.store
        self.codec = runtime.codec
        self.clock = runtime.clock
        # The effect limits this worker's dispatches ask (runtime/flow.py).
        self.flow = FlowGate(self.store, self.clock)
        self.owner = owner
        self.alive = True
        # Sessions in flight, so the worker can tell one that a cancel request arrived.
        self.sessions: dict[InstanceId, Session] = {}

    def _run_span(self, instance: InstanceRecord) -> contextlib.AbstractContextManager[str | None]:
        if self.tracing is None:
            return contextlib.nullcontext()
        return self.tracing.run(instance, worker=self.owner)

    async def drive(self, instance: InstanceRecord) -> None:
        if instance.generation == 1 and instance.run == 1:
            # Its first owner: every journal write is fenced on an owner's generation, so
            # nothing can be journaled yet and there is nothing to read.
            journal = Journal(steps={}, effects={})
        else:
            journal = await self.store.journal(instance.instance_id, instance.run)
        session = Session(
            alive=lambda: self.alive,
            instance=instance,
            owner=self.owner,
            journal=journal,
            store=self.store,
            codec=self.codec,
            clock=self.clock,
            detection=self.detection,
            metrics=self.metrics,
            tracing=self.tracing,
            flow=self.flow,
            doorbell=self.runtime.doorbell,
        )
        self.sessions[instance.instance_id] = session
        try:
            definition = self._pinned_definition(instance)
            if definition is None:
                # Not ours to run, and lacking the code is no reason to park it: give it back
                # as it was (same due time), for a worker that serves its definition.
                log.error(
                    "claimed %s, pinned to %s v%s (fingerprint %s), which this worker does not "
                    "serve; giving it back untouched (the claim should not have handed it out)",
                    instance.instance_id,
                    instance.workflow_name,
                    instance.workflow_version,
                    instance.fingerprint,
                    extra=journal_log.identity(instance, worker=self.owner),
                )
                await session.commit(Release(available_at=instance.available_at))
                return
            with self._run_span(instance) as keep:
                # The first run's trace context is kept with the instance by its next commit.
                session.trace_to_keep = keep
                if faults.plan is not None:
                    faults.point("instance.after_claim", instance=instance.business_key)
                # A run that continues as new is followed by the next one under this claim, a
                # bounded number of times: past it the lease is given back, due at once, so
                # that a chain that never waits shares the worker with everyone else.
                for _ in range(limits.RUNS_PER_CLAIM_MAX):
                    following = await self._drive_run(session, definition)
                    if following is None:
                        break
                    session = following
                    self.sessions[instance.instance_id] = session
                else:
                    await session.commit(Release(available_at=self.clock.now()))
        except LostOwnership:
            log.warning(
                "lost ownership of %s; another worker holds it",
                instance.instance_id,
                extra=journal_log.identity(instance, worker=self.owner),
            )
        except Abandon as abandon:
            log.error(
                "stopped driving %s: %s",
                instance.instance_id,
                abandon,
                extra=journal_log.identity(instance, worker=self.owner),
            )
        finally:
            if self.sessions.get(instance.instance_id) is session:
                del self.sessions[instance.instance_id]

    async def _drive_run(self, session: Session, definition: WorkflowDefinition) -> Session | None:
        """Drive the session's run to its next resting point; the session of the next run
        when it continued as new."""
        business_key = session.instance.business_key
        try:
            return await self._run(session, definition)
        except Park as park:
            await self._park(session, park)
        except Suspend as suspend:
            # A back-off decided from what the session knew: an arrival before this
            # release makes it due at once (the store's arrival flag).
            if faults.plan is not None:
                faults.point("instance.before_release", instance=business_key)
            await session.commit(Release(available_at=suspend.available_at))
        except Waiting:
            pass  # WAITING and its wake-up time are already committed.
        return None

    def cancel_requested(self, instance_id: InstanceId) -> None:
        session = self.sessions.get(instance_id)
        if session is not None:
            session.cancel_requested = True

    def _pinned_definition(self, instance: InstanceRecord) -> WorkflowDefinition | None:
        """The definition the instance is pinned to, or None when this worker lacks it (its
        name, version or fingerprint): the fingerprint is what proves the code compatible,
        so another fingerprint of the same version is never run on the off chance."""
        try:
            definition = self.registry.get(instance.workflow_name, instance.workflow_version)
        except (UnknownWorkflowError, UnknownVersionError):
            return None
        return definition if definition.fingerprint == instance.fingerprint else None

    async def _run(self, session: Session, definition: WorkflowDefinition) -> Session | None:
        if session.status is InstanceStatus.SCHEDULED and not await self._begin(session):
            return None
        if session.status is InstanceStatus.WAITING:
            # Woken by its timer, an event or a cancel request: replay decides which.
            await session.commit(
                instance_change(InstanceStatus.WAITING, InstanceEvent.WAKE, reason_code=WOKEN)
            )
        if session.status in (InstanceStatus.COMPENSATING, InstanceStatus.CANCELLING):
            await (await self._compensations(session)).run()
            return None
        ctx = WorkflowContext(session, definition, registry=self.registry)
        try:
            value = await self._branches_ended(ctx, definition, session)
            await children.await_children(ctx)
            result = self.codec.encode(value)
        except (Park, Suspend, Abandon):
            raise
        except ContinueAsNew as continued:
            return await self._continue(session, ctx, continued.input_text)
        except Cancelled as cancelled:
            await self._cancel(session, cancelled.stopped, ctx)
            return None
        except Exception as exc:  # noqa: BLE001 - the workflow's own failure is recorded.
            if definition.is_business_failure(exc):
                await self._fail(session, exc, ctx)
            else:
                await self._defect(session, definition, exc)
            return None
        journaled = sum(1 for seq in session.journal.steps if seq > 0)
        # The one park about code that stays: the fingerprint matched, yet the journal holds
        # steps this code did not ask for. Compatibility is then unprovable, so the run is
        # preserved for a person rather than finished on code that disagrees with its history.
        if ctx.steps_taken < journaled:
            raise Park(
                "replay_divergence",
                f"the workflow returned after {ctx.steps_taken} steps but the journal holds "
                f"{journaled}",
            )
        if faults.plan is not None:
            faults.point("instance.before_finish", instance=session.instance.business_key)
        await session.commit(
            instance_change(
                session.status,
                InstanceEvent.COMPLETE,
                result=result,
                reason_code="completed",
                release=True,
            )
        )
        return None

    async def _continue(
        self, session: Session, ctx: WorkflowContext, input_text: str
    ) -> Session | None:
        """Close the session's run and open the next, in one commit: the session of the new
        run (same owner, generation and lease, an empty journal), or None when a cancel
        request won the race and the instance cancels instead."""
        journaled = sum(1 for seq in session.journal.steps if seq > 0)
        if ctx.steps_taken < journaled:
            raise Park(
                "replay_divergence",
                f"the workflow continued as new after {ctx.steps_taken} steps but the journal "
                f"holds {journaled}",
            )
        instance = session.instance
        if faults.plan is not None:
            faults.point("run.before_switch", instance=instance.business_key, run=instance.run)
        try:
            if session.cancel_requested:
                raise Cancelled(f"run {instance.run} did not continue as new")
            # A cancel request that arrived first wins: the switch is not made, the instance
            # cancels with every obligation of every run.
            await session.commit(ContinueRun(run=instance.run, input=input_text), NoCancelRequest())
        except Cancelled as cancelled:
            await self._cancel(session, cancelled.stopped, ctx)
            return None
        if faults.plan is not None:
            faults.point("run.after_switch", instance=instance.business_key, run=instance.run + 1)
        following = dataclasses.replace(
            instance, run=RunNumber(instance.run + 1), run_input=input_text, status=session.status
        )
        return Session(
            alive=session.alive,
            instance=following,
            owner=session.owner,
            journal=Journal(steps={}, effects={}),
            store=session.store,
            codec=session.codec,
            clock=session.clock,
            detection=session.detection,
            metrics=session.metrics,
            tracing=session.tracing,
            flow=session.flow,
            doorbell=session.doorbell,
        )

    async def _carried(self, session: Session) -> list[EffectRecord]:
        """The effects earlier runs of the instance committed (their obligations stay the
        instance's): read only when a run fails or is cancelled, never to replay."""
        if session.instance.run <= 1:
            return []
        return [
            e
            for e in await self.store.effects(session.instance_id)
            if session.instance.first_run <= e.run < session.instance.run
            and e.seq > 0
            and e.compensates is None
        ]

    async def _compensations(self, session: Session) -> CompensationRunner:
        instance = session.instance
        # Earlier runs' steps: their succeeded children with a compensating workflow stay the
        # instance's obligations, as their effects do (read only to compensate).
        steps = [
            step
            for run in range(instance.first_run, instance.run)
            for step in (
                await self.store.journal(instance.instance_id, RunNumber(run))
            ).steps.values()
        ]
        return CompensationRunner(
            session, self.registry, carried=await self._carried(session), carried_steps=steps
        )

    async def _begin(self, session: Session) -> bool:
        """A scheduled instance's time has come (or a cancel request made it due): it begins
        its run, unless a request to cancel stands, which ends it CANCELLED before any of its
        code runs (the start's commit holds to there being no request, so one that races it
        wins). False when it was cancelled."""
        why = "cancelled before its scheduled start: no step ran"
        if not session.cancel_requested:
            try:
                await session.commit(
                    instance_change(
                        InstanceStatus.SCHEDULED, InstanceEvent.START, reason_code="started"
                    ),
                    NoCancelRequest(),
                )
                return True
            except Cancelled:
                pass
        await self._cancel(session, why)
        return False

    async def _branches_ended(
        self, ctx: WorkflowContext, definition: WorkflowDefinition, session: Session
    ) -> object:
        """The workflow function's value, once every branch it started has ended; an error
        of several branches is the one that decides (runtime/branches.py)."""
        try:
            value = await definition.function(
                ctx, self.codec.decode(session.instance.open_run_input)
            )
        except BaseException as exc:
            await ctx.close_branches(hard=fatal(exc))
            decided = deciding(exc, business=definition.is_business_failure)
            if decided is exc:
                raise
            raise decided from None
        await ctx.close_branches()
        return value

    async def _fail(self, session: Session, exc: Exception, ctx: WorkflowContext) -> None:
        runner = await self._compensations(session)
        confirmed = session.confirmed_effects() + [
            e for e in runner.carried if e.state is EffectState.CONFIRMED
        ]
        event = failure_event(
            # A succeeded child with a compensating workflow counts as a confirmed effect.
            effects_confirmed=len(confirmed) + len(runner.children()),
            pivot_confirmed=any(
                e.classification == Classification.FORWARD_RECOVERY_ONLY.value for e in confirmed
            ),
        )
        if event is not InstanceEvent.FAIL_AFTER_PIVOT:
            # A final ending (FAILED, or COMPENSATED once undone) comes after every "wait"
            # child's: until then WAITING on their endings, nothing of the failure recorded, so
            # a replay decides it again the same way and resumes the wait. A forward-recovery
            # park is no ending: its children keep running, the policy holds when it ends.
            await children.await_children(ctx, cancellable=False)
        detail = self.codec.encode(describe_error(exc))
        kind = "result not serialisable" if isinstance(exc, PayloadError) else "workflow error"
        cause = f"{kind}: {type(exc).__name__}: {exc}"[:2000]
        if event is InstanceEvent.FAIL_AFTER_EFFECTS:
            await runner.begin(
                f"{kind} after {len(confirmed)} confirmed effect(s): {detail}", cause=cause
            )
            await runner.run()
            return
        # FAIL_CLEAN ends FAILED, FAIL_AFTER_PIVOT ends FORWARD_RECOVERY_REQUIRED: the table says.
        await session.commit(
            instance_change(
                session.status,
                event,
                reason_code=event.value,
                reason=f"{kind}: {detail}",
                release=True,
                cause=cause,
            )
        )

    async def _defect(
        self, session: Session, definition: WorkflowDefinition, exc: Exception
    ) -> None:
        """A bug in the workflow's code, not an outcome it meant: tried again after the
        policy's backoff (a durable suspension, counted on the timeline), then parked with
        the traceback and the code fingerprint. Nothing is compensated: a deploy fixes it."""
        error = f"{type(exc).__name__}: {exc}"[:500]
        confirmed = len(session.confirmed_effects())
        if isinstance(exc, StepFailedError):
            # The step has been tried as often as its own policy allows: no defect retries.
            raise Park(
                WORKFLOW_DEFECT,
                f"workflow defect in local step {exc.seq}, after the step's own retries (not "
                f"tried again as a defect): {error}; code fingerprint {definition.fingerprint}; "
                f"nothing was compensated ({confirmed} confirmed effect(s) stay applied): "
                "deploy a fix, then retry the step (or declare the exception a business "
                f"failure) and resume the instance\n{_trace(exc)}",
            )
        timeline = await self.store.timeline(session.instance_id)
        attempt = defect_streak((e.subject, e.detail) for e in timeline) + 1
        policy = definition.defect_retry
        if attempt < policy.attempts_max and policy.retries(error_names(exc)):
            identity = f"{session.instance_id}:{session.instance.run}:defect"
            pause = policy.delay_before(attempt + 1, identity=identity)
            log.warning("workflow defect in %s, trying again: %s", session.instance_id, error)
            await session.commit(
                instance_change(
                    session.status,
                    InstanceEvent.SUSPEND,
                    reason_code=DEFECT_RETRY,
                    reason=f"workflow defect (attempt {attempt} of {policy.attempts_max}): {error}",
                    release=True,
                    available_at=self.clock.now() + pause.total_seconds(),
                )
            )
            return
        raise Park(
            WORKFLOW_DEFECT,
            f"workflow defect after {attempt} attempt(s): {error}; code fingerprint "
            f"{definition.fingerprint}; nothing was compensated ({confirmed} confirmed "
            "effect(s) stay applied): deploy a fix and resume the instance (or declare the "
            f"exception a business failure)\n{_trace(exc)}",
        )

    async def _cancel(
        self, session: Session, stopped: str, ctx: WorkflowContext | None = None
    ) -> None:
        """Stop before new work; undo what the request asks, unless a pivot forbids it; keep
        the rest as the cancellation's residual effects. First the "wait" children of the run
        (``ctx``; none before a scheduled start) end: CANCELLING is entered only after them."""
        if ctx is not None:
            await children.await_children(ctx, cancellable=False)
        confirmed = session.confirmed_effects() + [
            e for e in await self._carried(session) if e.state is EffectState.CONFIRMED
        ]
        pivot = any(
            e.classification == Classification.FORWARD_RECOVERY_ONLY.value for e in confirmed
        )
        # The request as recorded now: it may have arrived after the claim (heartbeat, a
        # refused step), so the claimed row does not hold its reason or wish to compensate.
        asked = await self.store.get(session.instance_id)
        if asked is not None and asked.cancel_requested_at is not None:
            session.instance = dataclasses.replace(
                session.instance,
                cancel_requested_at=asked.cancel_requested_at,
                cancel_reason=asked.cancel_reason,
                cancel_compensate=asked.cancel_compensate,
            )
        instance = session.instance
        undo = instance.cancel_compensate and not pivot
        why = f"cancel requested: {instance.cancel_reason}; {stopped}"
        if pivot and instance.cancel_compensate:
            why += "; a forward-recovery-only effect is confirmed, so nothing is undone"
        runner = await self._compensations(session)
        await runner.begin(
            why, cancelling=True, undo=undo, cause=f"cancel requested: {instance.cancel_reason}"
        )
        await runner.run()

    async def _park(self, session: Session, park: Park) -> None:
        # Logged once the park is durable (journal_log), like every other transition.
        await session.commit(
            instance_change(
                session.status,
                InstanceEvent.PARK,
                reason_code=park.code,
                reason=park.reason[:4000],
                release=True,
                cause=f"{park.code}: {park.reason}"[:2000],
            )
        )


def _trace(exc: BaseException) -> str:
    """The end of the exception's traceback (its cause chain included), for a park reason."""
    return "".join(traceback.format_exception(exc))[-limits.DEFECT_TRACEBACK_CHARS_MAX :]
