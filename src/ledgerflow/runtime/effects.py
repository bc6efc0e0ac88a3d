"""The effect protocol, driven for one effect of one instance (internal).

1. Write-ahead intent: step STARTED and effect INTENDED, with the derived idempotency key, in
   one durable commit before anything is sent.
2. Dispatch with that key.
3. The outcome (CONFIRMED with evidence, FAILED when proven and final, UNKNOWN otherwise) is
   committed together with what comes next (the retry's new intent and its due time, or the
   step's completion).
4. UNKNOWN is resolved by :func:`~ledgerflow.model.effect.resolve_unknown`: the participant's
   lookup (asked by :mod:`~ledgerflow.runtime.effect_asks` until it gives a verdict or its
   policy is spent), a re-dispatch under the same key where the participant deduplicates and
   its lookup did not say it cannot tell, or an operator.

An INTENDED effect whose step is STARTED may have been sent by a worker that died, so on
recovery it becomes UNKNOWN first. An INTENDED effect whose step is RETRY_SCHEDULED was not
sent yet: the step turns STARTED durably before each re-dispatch, which is what makes that
distinction safe.

Each decision (what the journaled state means, what an answer proves, what a lookup settles)
commits its writes and names the next move (:mod:`~ledgerflow.runtime.effect_moves`); one
loop, :meth:`EffectDriver.run`, carries the moves out until the effect is settled, a failure
proven or the instance parked. No decision calls the next one, so a retry is a loop's turn,
not a deeper call, and the callback's waiter answers with a move like every other decision.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ledgerflow.errors import EffectRejectedError
from ledgerflow.ledger.records import EffectRecord, NoCancelRequest, Write
from ledgerflow.ledger.transitions import StepIdentity
from ledgerflow.model.classification import Classification
from ledgerflow.model.compensation import Precondition, PreconditionVerdict
from ledgerflow.model.definition import EffectCall, EffectDeclaration
from ledgerflow.model.effect import (
    EffectEvent,
    EffectState,
    LookupVerdict,
    ResolutionKind,
    resolve_unknown,
)
from ledgerflow.model.ids import (
    IdempotencyKey,
    StepSeq,
    compensation_key,
    effect_id,
    idempotency_key,
)
from ledgerflow.model.step import StepEvent, StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.calls import describe_error, error_names
from ledgerflow.runtime.completion import CallbackCompletion
from ledgerflow.runtime.control import Diverged, Park
from ledgerflow.runtime.effect_asks import EffectAsks
from ledgerflow.runtime.effect_moves import AwaitCallback, Dispatch, Move, Resolve, Settled
from ledgerflow.runtime.heartbeats import AttemptHeartbeats, dispatch_heartbeats, flushing
from ledgerflow.runtime.late_answers import late_answer_keeper
from ledgerflow.runtime.session import Session


class EffectDriver(EffectAsks):
    def __init__(
        self,
        *,
        session: Session,
        declaration: EffectDeclaration,
        seq: StepSeq,
        name: str,
        payload_text: str,
        wait_until: Callable[[float | None], Awaitable[None]],
        undoes: EffectRecord | None = None,
    ) -> None:
        self.session = session
        self.declaration = declaration
        self.seq = seq
        self.name = name
        self.payload_text = payload_text
        self.wait_until = wait_until
        self.policy, self.priority = declaration.retry, declaration.priority
        # A compensation: the effect it undoes gives its key namespace and its fault points.
        self.undoes = undoes
        self.kind = StepKind.COMPENSATION if undoes else StepKind.EFFECT
        self.points = "compensation" if undoes else "effect"
        instance = session.instance
        self.effect_id = effect_id(instance.instance_id, instance.run, seq)
        self.step_identity = StepIdentity(
            instance=instance,
            seq=seq,
            kind=self.kind,
            name=name,
            input=payload_text,
            retry_policy=session.codec.encode(self.policy.to_record()),
        )
        # An asynchronous effect's callback is waited for by a collaborator that writes
        # through this driver.
        self.callbacks = CallbackCompletion(self)
        self.key = (
            compensation_key(undoes.idempotency_key)
            if undoes
            else idempotency_key(
                tenant=instance.tenant,
                effect=self.effect_id,
                participant=declaration.participant.name,
                operation=declaration.operation,
            )
        )

    async def run(self) -> Any:
        """Drive the effect until it is settled (its value), proven failed or parked (raised)."""
        move = await self._recovered()
        while not isinstance(move, Settled):
            if isinstance(move, Dispatch):
                await self._admitted(move.attempt)
                sent = await self._send(attempt=move.attempt)
                move = await self._settle(sent, attempt=move.attempt)
            elif isinstance(move, AwaitCallback):
                move = await self.callbacks.await_completion(attempt=move.attempt)
            else:
                move = await self.resolve()
        return move.value

    async def _recovered(self) -> Move:
        """The first move: from nothing journaled (write the intent), or from what the journal
        holds of this effect (a recovery, a replay)."""
        effect = self.session.effect(self.seq)
        step = self.session.step(self.seq)
        if step is None:
            # A compensation is already PLANNED; an effect of workflow code has no row yet.
            planned = effect.state if effect is not None else EffectState.NEW
            if planned is EffectState.PLANNED and not await self._precondition_holds():
                return Settled(None)
            intent: tuple[Write, ...] = (
                self.step_write(StepEvent.START, attempt=1),
                self.effect_write(EffectEvent.INTEND, attempt=1, detail="write-ahead intent"),
            )
            if self.undoes is None:
                # After a cancel request is accepted no new effect is dispatched: the store
                # refuses this intent if one arrived, and the instance cancels instead.
                intent = (*intent, NoCancelRequest())
            await self.session.commit(*intent)
            return Dispatch(1)
        effect = self._adopt(effect)
        if step.status is StepStatus.COMPLETED and effect.state is EffectState.FAILED:
            # An operator skipped the step (repair skip-step): the effect stays FAILED, proven
            # not applied, and the workflow receives the substitute result they recorded.
            return Settled(self.session.codec.decode(step.output or "null"))
        if effect.state in (EffectState.CONFIRMED, EffectState.SATISFIED):
            return Settled(self.session.codec.decode(effect.evidence or "null"))
        if effect.state is EffectState.FAILED:
            raise self.failed(effect.reason or "proven not applied")
        if effect.state is EffectState.ACCEPTED:
            return AwaitCallback(effect.attempt)
        if effect.state is EffectState.INTENDED and step.status is StepStatus.RETRY_SCHEDULED:
            await self.wait_until(step.next_attempt_at)
            await self.session.commit(self.step_write(StepEvent.START, attempt=effect.attempt))
            return Dispatch(effect.attempt)
        if effect.state is EffectState.INTENDED and await self._throttled(effect.attempt):
            # It waited for its flow-control limits and was never sent: ask again.
            return Dispatch(effect.attempt)
        if effect.state is EffectState.INTENDED:
            # A worker died between the intent and the outcome: it may have sent the request.
            await self.session.commit(
                self.effect_write(
                    EffectEvent.LOSE_OUTCOME,
                    attempt=effect.attempt,
                    doubt=effect.attempt,
                    reason=(
                        "the worker stopped before the outcome was recorded"
                        if self.declaration.heartbeat_timeout_seconds is None
                        else "the worker stopped, or missed the attempt's heartbeat, before "
                        "the outcome was recorded"
                    ),
                )
            )
        return Resolve()

    async def _admitted(self, attempt: int) -> None:
        """Wait until the attempt's flow-control limits admit it (:mod:`ledgerflow.runtime.flow`):
        its timeout starts at the dispatch that follows, never while it is THROTTLED."""
        session, declared = self.session, self.declaration
        if session.flow is not None:
            await session.flow.admit(
                session.instance, owner=str(session.owner), effect_id=self.effect_id,
                payload=lambda: session.codec.decode(self.payload_text), attempt=attempt,
                participant=declared.participant.name, operation=declared.operation,
                wait_until=session.wait_until, priority=self.priority,
            )  # fmt: skip

    async def _throttled(self, attempt: int) -> bool:
        flow = self.session.flow
        return flow is not None and await flow.never_sent(self.effect_id, attempt)

    def _adopt(self, effect: EffectRecord | None) -> EffectRecord:
        """Take the journaled effect's id and key, or refuse a position that holds another.

        An effect keeps the id and key it was minted with for good: a declared migration may
        move it to another position, and its key is never derived again from the new one."""
        participant, operation = self.declaration.participant.name, self.declaration.operation
        if self.undoes is not None:
            same = effect is not None and effect.idempotency_key == self.key
        else:
            same = (
                effect is not None
                and effect.participant == participant
                and effect.operation == operation
            )
        if effect is None or not same:
            holds = (
                f"effect {effect.participant}.{effect.operation} under key {effect.idempotency_key}"
                if effect is not None
                else "no effect"
            )
            asks = f"effect {participant}.{operation} under key {self.key}"
            raise Diverged(
                self.seq,
                holds=holds,
                asks=asks,
                reason=f"step {self.seq}: the journal holds {holds}, the code asks for {asks}",
            )
        self.effect_id, self.key = effect.effect_id, effect.idempotency_key
        return effect

    def _call(
        self,
        *,
        attempt: int,
        key: IdempotencyKey,
        deadline_at: float | None = None,
        heartbeats: AttemptHeartbeats | None = None,
    ) -> EffectCall:
        effect = self.session.effect(self.seq)
        last = effect.heartbeat_details if effect is not None else None
        return EffectCall(
            participant=self.declaration.participant.name,
            operation=self.declaration.operation,
            idempotency_key=key,
            effect_id=self.effect_id,
            instance_id=self.session.instance_id,
            attempt=attempt,
            payload=self.session.codec.decode(self.payload_text),
            original_key=self.undoes.idempotency_key if self.undoes else None,
            original_evidence=(
                self.session.codec.decode(self.undoes.evidence or "null") if self.undoes else None
            ),
            deadline_at=deadline_at,
            last_heartbeat=self.session.codec.decode(last) if last is not None else None,
            generation=self.session.generation,
            heartbeats=heartbeats,
        )

    async def _precondition_holds(self) -> bool:
        """Ask a compensation's precondition before its intent; False when it is not applied."""
        check = self.declaration.precondition
        if check is None:
            return True
        call = self._call(attempt=1, key=self.key)
        try:
            answer = await self._by_deadline(check, call)
        except Exception as exc:  # noqa: BLE001 - no answer is no permission to apply.
            raise Park(
                "compensation_precondition_unavailable",
                f"{self.declaration.participant.name}.{self.declaration.operation} for "
                f"{call.original_key}: the "
                f"precondition could not be asked: {type(exc).__name__}: {exc}"[:1000],
            ) from None
        if not isinstance(answer, Precondition) or answer.verdict is PreconditionVerdict.VIOLATED:
            reason = answer.reason if isinstance(answer, Precondition) else repr(answer)
            raise Park(
                "compensation_precondition_violated",
                f"{self.declaration.participant.name}.{self.declaration.operation} for "
                f"{call.original_key}: {reason}",
            )
        if answer.verdict is PreconditionVerdict.HOLDS:
            return True
        evidence = self.session.codec.encode(answer.evidence)
        await self.session.commit(
            self.effect_write(
                EffectEvent.SATISFY,
                attempt=1,
                evidence=evidence,
                reason="precondition: the participant's state already reflects it",
            )
        )
        return False

    async def _send(self, *, attempt: int) -> str | Exception:
        """Call the participant: its evidence as ledger text, or what it raised."""
        if faults.plan is not None:
            faults.point(f"{self.points}.before_dispatch", **self._where(attempt))
        beats = await dispatch_heartbeats(
            self.session, self.declaration, seq=self.seq, effect_id=self.effect_id, attempt=attempt
        )
        deadline_at = self.session.clock.now() + self.declaration.timeout_seconds
        call = self._call(attempt=attempt, key=self.key, deadline_at=deadline_at, heartbeats=beats)
        function = flushing(self.declaration.function, beats)
        keeper = late_answer_keeper(
            self.session,
            key=self.key,
            effect_id=self.effect_id,
            participant=self.declaration.participant.name,
            seq=self.seq,
            attempt=attempt,
        )
        outcome: str | Exception
        sent_at = time.perf_counter()
        try:
            with self._span(self.points, attempt):
                evidence = await self._by_deadline(function, call, on_late=keeper, heartbeats=beats)
                outcome = self.session.codec.encode(evidence)
        except Exception as exc:  # noqa: BLE001 - settled below: a rejection or UNKNOWN.
            outcome = exc
        if self.session.metrics is not None:
            seconds = time.perf_counter() - sent_at
            self.session.metrics.dispatched(self.declaration, seconds=seconds, answer=outcome)
        if faults.plan is not None:
            faults.point(f"{self.points}.after_dispatch", **self._where(attempt))
        return outcome

    async def _settle(self, sent: str | Exception, *, attempt: int) -> Move:
        """Record what the dispatch proved, together with what comes next."""
        if isinstance(sent, EffectRejectedError):
            return await self._rejected(sent, attempt=attempt)
        if isinstance(sent, Exception):
            await self.session.commit(
                self.effect_write(
                    EffectEvent.LOSE_OUTCOME,
                    attempt=attempt,
                    doubt=attempt,
                    reason=f"dispatch gave no proof: {type(sent).__name__}: {sent}"[:500],
                    failed=(attempt, sent),
                )
            )
            return Resolve()
        if self.declaration.completes_by_callback is not None:
            # Accepted is not done: the participant completes it by calling back.
            deadline = self.session.clock.now() + self.declaration.completes_by_callback
            await self.session.commit(
                self.effect_write(
                    EffectEvent.ACCEPT,
                    attempt=attempt,
                    evidence=sent,
                    reason="accepted; completes by callback",
                ),
                self.step_write(
                    StepEvent.DEFER,
                    attempt=attempt,
                    next_attempt_at=deadline,
                ),
            )
            return AwaitCallback(attempt)
        await self.session.commit(
            self.effect_write(EffectEvent.CONFIRM, attempt=attempt, evidence=sent),
            self.step_write(StepEvent.COMPLETE, attempt=attempt, output=sent),
        )
        if faults.plan is not None:
            faults.point(f"{self.points}.after_outcome", **self._where(attempt))
        return Settled(self.session.codec.decode(sent))

    async def _rejected(self, rejection: EffectRejectedError, *, attempt: int) -> Move:
        error = self.session.codec.encode(describe_error(rejection))
        retry = (
            rejection.retryable
            and self.policy.retries(error_names(rejection))
            and attempt < self.policy.attempts_max
        )
        previous = self.session.effect(self.seq)
        if not retry and previous is not None and previous.doubt:
            # This attempt was refused, but an earlier one may still land: only a lookup (or an
            # operator) can prove the effect as a whole was never applied.
            await self.session.commit(
                self.effect_write(
                    EffectEvent.LOSE_OUTCOME,
                    attempt=attempt,
                    reason=(
                        f"attempt {attempt} was refused ({rejection.error_code}) but attempt "
                        f"{previous.doubt} is still in doubt"
                    ),
                    failed=(attempt, rejection),
                )
            )
            return Resolve()
        if not retry:
            reason = f"participant proved not applied: {rejection.error_code}: {rejection.message}"
            await self.session.commit(
                self.effect_write(
                    EffectEvent.REJECT_FINAL,
                    attempt=attempt,
                    reason=reason[:500],
                    failed=(attempt, rejection),
                ),
                self.step_write(StepEvent.FAIL, attempt=attempt, error=error),
            )
            raise self.failed(reason)
        return await self._schedule_redispatch(
            attempt=attempt,
            error=error,
            why=f"rejected ({rejection.error_code}); retry under the same key",
            failed=(attempt, rejection),
        )

    async def _schedule_redispatch(
        self,
        *,
        attempt: int,
        error: str | None,
        why: str,
        doubt: int | None = None,
        failed: tuple[int, BaseException] | None = None,
    ) -> Move:
        """Commit the next attempt's intent with its due time and wait for it: the next move
        dispatches it."""
        following = attempt + 1
        pause = self.policy.delay_before(following, identity=self.key)
        due = self.session.clock.now() + pause.total_seconds()
        await self.session.commit(
            self.effect_write(
                EffectEvent.REDISPATCH,
                attempt=following,
                detail=why,
                doubt=doubt,
                failed=failed,
            ),
            self.step_write(
                StepEvent.SCHEDULE_RETRY,
                attempt=following,
                error=error,
                next_attempt_at=due,
            ),
        )
        await self.wait_until(due)
        await self.session.commit(self.step_write(StepEvent.START, attempt=following))
        return Dispatch(following)

    async def resolve(self) -> Move:
        """Settle an UNKNOWN outcome (:func:`~ledgerflow.model.effect.resolve_unknown`)."""
        effect = self.session.effect(self.seq)
        if effect is None or effect.state is not EffectState.UNKNOWN:
            raise AssertionError(f"resolving step {self.seq}, which is not UNKNOWN")
        attempt = effect.attempt
        answer, lookup_error = await self._lookup(effect)
        resolution = resolve_unknown(
            answer=answer,
            deduplicates=self.declaration.participant.deduplicates,
            doubt_goes_to_operator=self.declaration.classification
            is Classification.MANUAL_INTERVENTION,
            attempts_left=self.policy.attempts_max - attempt,
            lookup_unreachable=answer is None and bool(lookup_error),
        )
        # A lookup's "not applied" fences every attempt so far: nothing is in doubt any more.
        fenced = answer is not None and answer.verdict is LookupVerdict.NOT_APPLIED
        if self.session.metrics is not None and resolution.kind is not ResolutionKind.PARK:
            # Settled by the participant's evidence, or by sending the same key again.
            again = resolution.kind is ResolutionKind.REDISPATCH and not fenced
            how = "redispatch" if again else "lookup"
            self.session.metrics.settled(
                self.declaration.participant.name, self.declaration.operation, how=how
            )
        if resolution.kind is ResolutionKind.CONFIRM:
            evidence_text = self.session.codec.encode(resolution.evidence)
            await self.session.commit(
                self.effect_write(
                    EffectEvent.CONFIRM,
                    attempt=attempt,
                    evidence=evidence_text,
                    detail=resolution.reason,
                ),
                self.step_write(StepEvent.COMPLETE, attempt=attempt, output=evidence_text),
            )
            return Settled(self.session.codec.decode(evidence_text))
        if resolution.kind is ResolutionKind.REDISPATCH:
            return await self._schedule_redispatch(
                attempt=attempt,
                error=None,
                why=resolution.reason,
                doubt=0 if fenced else None,
            )
        if resolution.kind is ResolutionKind.FAIL:
            await self.session.commit(
                self.effect_write(
                    EffectEvent.REJECT_FINAL,
                    attempt=attempt,
                    doubt=0,
                    reason=resolution.reason,
                ),
                self.step_write(
                    StepEvent.FAIL,
                    attempt=attempt,
                    error=self.session.codec.encode({"message": resolution.reason}),
                ),
            )
            raise self.failed(resolution.reason)
        raise Park(
            "effect_outcome_unknown",
            f"effect {self.declaration.participant.name}.{self.declaration.operation} "
            f"(step {self.seq}, "
            f"key {self.key}, attempt {attempt}): {resolution.reason}{lookup_error}; "
            f"last known: {effect.reason}",
        )
