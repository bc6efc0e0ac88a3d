"""Reconciliation: compare what the ledger claims with the participants' own facts (internal).

A run takes, bounded, the effects whose ledger state is settled (CONFIRMED, FAILED) or in doubt
(UNKNOWN, of a parked instance), least recently compared first, asks each participant's lookup
by idempotency key and attempt, and acts on the difference as
:mod:`ledgerflow.model.reconciliation` decides:

- in doubt, and the participant proves it applied: corrected through the audited, idempotent
  repair command (:class:`~ledgerflow.operators.repairs.Repairs`, resolve-effect with the
  participant's evidence, resuming the instance parked for it), attributed to the reconciler;
- any other difference: an attention flag with the evidence, for a person; nothing is changed,
  and nothing is ever sent to a participant again;
- the participant cannot tell (lookup unknown, failing, timing out): counted, no change.

Every run is recorded (``lf_reconciliations``) with its counts and one line per difference;
the effects it compared are stamped so that the next bounded run continues with the rest. A
dry run asks the same questions and plans the same corrections but writes nothing.

The operators' service runs it (``Operations.reconcile``, ``AsyncOperations.reconcile`` and
its periodic task, ``AsyncOperations.reconcile_task``); a run's store calls go through the
store thread it is given, its lookups through each participant's own deadline.

Example::

    repairs = Repairs(store, Authority.from_environment())
    run = await reconcile(thread, registry, repairs=repairs, limit=100)
    print(run.compared, run.corrected, run.escalated)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError, OperatorError
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import EffectRecord
from ledgerflow.model.definition import Registry
from ledgerflow.model.effect import LookupAnswer
from ledgerflow.model.ids import EffectId
from ledgerflow.model.reconciliation import RECONCILE_REFUSED, Action, decide
from ledgerflow.model.repair import RepairKind
from ledgerflow.operators.authority import RECONCILER
from ledgerflow.operators.repairs import RepairRequest, Repairs
from ledgerflow.runtime.calls import call_by_deadline
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.runtime.store_thread import AsyncStore

__all__ = ["RECONCILER", "ReconciliationRun", "reconcile"]

log = logging.getLogger("ledgerflow.reconcile")

# How much of the ledger's evidence a flag repeats; the ledger keeps all of it.
_EVIDENCE_CHARS = 1000
_NOTE_CHARS = 600


@dataclass(slots=True)
class _Run:
    """One run in progress: its settings, its counts and its lines."""

    thread: AsyncStore
    registry: Registry
    repairs: Repairs
    actor: str
    clock: Clock
    dry_run: bool
    corrections_left: int
    run_id: int | None = None
    started_at: float = 0.0
    counts: dict[Action, int] = field(default_factory=lambda: dict.fromkeys(Action, 0))
    details: list[dict[str, Any]] = field(default_factory=list)
    # Compared, so stamped at the end; a deferred correction is not, so it comes first next run.
    compared_ids: list[EffectId] = field(default_factory=list)
    compared: int = 0

    @property
    def label(self) -> str:
        return (
            "reconciliation dry run" if self.run_id is None else f"reconciliation run {self.run_id}"
        )

    # -- one effect --------------------------------------------------------------------------

    async def compare(self, effect: EffectRecord) -> None:
        answer, failure = await self._ask(effect)
        decision = decide(effect.state, answer.verdict)
        self.compared += 1
        if decision.action is Action.CORRECT and self.corrections_left <= 0:
            # Bounded: left in doubt, unstamped, so the next run takes it first.
            self._line(effect, answer, "deferred", note="the run's correction bound is reached")
            return
        self.compared_ids.append(effect.effect_id)
        if decision.action is Action.MATCH:
            self.counts[Action.MATCH] += 1
        elif decision.action is Action.UNREACHABLE:
            self.counts[Action.UNREACHABLE] += 1
            self._line(effect, answer, "unreachable", note=failure or decision.why)
        elif decision.action is Action.CORRECT:
            await self._correct(effect, answer)
        else:
            assert decision.reason_code is not None
            await self._escalate(effect, answer, decision.reason_code, decision.why)

    async def _ask(self, effect: EffectRecord) -> tuple[LookupAnswer, str | None]:
        """The participant's answer; a lookup that fails or times out proves nothing."""
        participant = self.registry.participants.get(effect.participant)
        lookup = participant.lookup_function if participant is not None else None
        if participant is None or lookup is None:
            return LookupAnswer.unknown(), f"participant {effect.participant} has no lookup here"
        declaration = participant.effects.get(effect.operation)
        timeout = (
            declaration.timeout_seconds
            if declaration is not None
            else limits.EFFECT_TIMEOUT_SECONDS_DEFAULT
        )
        try:
            # The highest attempt that may have been dispatched: a "not applied" answer fences
            # exactly the attempts the ledger knows of, as the engine's own lookup does.
            answer = await call_by_deadline(
                lookup, effect.idempotency_key, effect.attempt, seconds=timeout, clock=self.clock
            )
        except Exception as exc:  # noqa: BLE001 - a failed lookup proves nothing either way.
            return LookupAnswer.unknown(), f"the lookup failed: {type(exc).__name__}: {exc}"[:300]
        if not isinstance(answer, LookupAnswer):
            return LookupAnswer.unknown(), f"the lookup answered {type(answer).__name__}"
        return answer, None

    async def _correct(self, effect: EffectRecord, answer: LookupAnswer) -> None:
        request = RepairRequest(
            kind=RepairKind.RESOLVE_EFFECT,
            instance_id=effect.instance_id,
            seq=effect.seq,
            applied=True,
            evidence=answer.evidence,
            resume=True,
            actor=self.actor,
            reason=f"{self.label}: participant reports applied",
        )
        repairs = self.repairs
        try:
            result = await self.thread.call(
                repairs.plan if self.dry_run else repairs.apply, request
            )
        except OperatorError as exc:
            # Refused (stale, not authorized, a live worker): a person looks, and the reconciler
            # never tries another way (a fresh key, a re-dispatch) around the refusal.
            await self._escalate(effect, answer, RECONCILE_REFUSED, f"correction refused: {exc}")
            return
        if result.outcome == "no-op":
            # Someone applied this very correction since the candidates were read.
            self.counts[Action.MATCH] += 1
            self._line(effect, answer, "already-corrected", note=result.message)
            return
        self.corrections_left -= 1
        self.counts[Action.CORRECT] += 1
        self._line(
            effect,
            answer,
            "would-correct" if self.dry_run else "corrected",
            audit_id=result.audit_id,
            note="; ".join(result.plan.describe()),
        )

    async def _escalate(
        self, effect: EffectRecord, answer: LookupAnswer, reason_code: str, why: str
    ) -> None:
        self.counts[Action.ESCALATE] += 1
        if self.dry_run:
            self._line(effect, answer, "would-escalate", flag=reason_code, note=why)
            return
        evidence = {
            "run_id": self.run_id,
            "compared_at": self.started_at,
            "effect_id": effect.effect_id,
            "seq": effect.seq,
            "participant": effect.participant,
            "operation": effect.operation,
            "key": effect.idempotency_key,
            "attempt": effect.attempt,
            "ledger_state": effect.state.value,
            "ledger_evidence": (effect.evidence or "")[:_EVIDENCE_CHARS] or None,
            "participant_verdict": answer.verdict.value,
            "participant_evidence": answer.evidence,
            "why": why,
        }
        raised = await self.thread.call(
            self.repairs.store.raise_flag,
            instance_id=effect.instance_id,
            reason_code=reason_code,
            evidence=json.dumps(evidence, sort_keys=True, default=str),
            detected_by=self.actor,
            now=self.clock.now(),
        )
        # One open flag per instance and reason: a second drifted effect joins the open one.
        note = why if raised else f"{why} (a {reason_code} flag was already open)"
        self._line(effect, answer, "escalated", flag=reason_code, note=note)
        log.warning("%s: %s %s: %s", self.label, effect.instance_id, reason_code, why)

    def _line(
        self,
        effect: EffectRecord,
        answer: LookupAnswer,
        action: str,
        *,
        audit_id: int | None = None,
        flag: str | None = None,
        note: str | None = None,
    ) -> None:
        self.details.append(
            {
                "effect_id": effect.effect_id,
                "instance_id": effect.instance_id,
                "key": effect.idempotency_key,
                "participant": effect.participant,
                "operation": effect.operation,
                "ledger_state": effect.state.value,
                "participant_verdict": answer.verdict.value,
                "action": action,
                "audit_id": audit_id,
                "flag": flag,
                "note": (note or "")[:_NOTE_CHARS],
            }
        )

    def result(self, finished_at: float | None) -> ReconciliationRun:
        return ReconciliationRun(
            run_id=self.run_id,
            actor=self.actor,
            started_at=self.started_at,
            finished_at=finished_at,
            compared=self.compared,
            matched=self.counts[Action.MATCH],
            corrected=self.counts[Action.CORRECT],
            escalated=self.counts[Action.ESCALATE],
            unreachable=self.counts[Action.UNREACHABLE],
            details=tuple(self.details),
            dry_run=self.dry_run,
        )


async def reconcile(
    thread: AsyncStore,
    registry: Registry,
    *,
    repairs: Repairs,
    limit: int = limits.RECONCILE_LIMIT_DEFAULT,
    max_corrections: int = limits.RECONCILE_CORRECTIONS_DEFAULT,
    actor: str = RECONCILER,
    clock: Clock | None = None,
    dry_run: bool = False,
) -> ReconciliationRun:
    """Run one bounded reconciliation and return its record.

    At most ``limit`` effects are compared and at most ``max_corrections`` corrected; the
    participants asked are the registry's that have a lookup. Every store call (the
    corrections through ``repairs``, the flags, the run's record) runs on ``thread``, the thread
    of the store ``repairs`` works on. With ``dry_run`` the
    participants are asked and the corrections planned, but nothing is written: no repair, no
    flag, no run record, no comparison stamp.
    """
    if not 1 <= limit <= limits.RECONCILE_LIMIT_MAX:
        raise ConfigurationError(f"limit must be between 1 and {limits.RECONCILE_LIMIT_MAX}")
    if max_corrections < 0:
        raise ConfigurationError("max_corrections must not be negative")
    store = repairs.store
    run = _Run(
        thread=thread,
        registry=registry,
        repairs=repairs,
        actor=actor,
        clock=clock or SYSTEM_CLOCK,
        dry_run=dry_run,
        corrections_left=max_corrections,
    )
    run.started_at = run.clock.now()
    if not dry_run:
        run.run_id = await thread.call(store.begin_reconciliation, actor=actor, now=run.started_at)
    askable = sorted(n for n, p in registry.participants.items() if p.lookup_function is not None)
    candidates = await thread.call(store.reconcile_candidates, participants=askable, limit=limit)
    for effect in candidates:
        await run.compare(effect)
    finished_at = run.clock.now()
    finished = run.result(finished_at=finished_at)
    if dry_run:
        return finished
    await thread.call(
        store.finish_reconciliation,
        finished,
        compared_ids=run.compared_ids,
        now=finished_at,
    )
    log.info(
        "%s: compared %d, matched %d, corrected %d, escalated %d, unreachable %d",
        run.label,
        finished.compared,
        finished.matched,
        finished.corrected,
        finished.escalated,
        finished.unreachable,
    )
    return finished
