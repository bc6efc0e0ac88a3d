"""Audited repairs: plan (dry run) and apply, on a store (internal).

:class:`Repairs` checks the actor's authority, reads a snapshot of the instance, has
:mod:`ledgerflow.model.repair_rules` plan the repair, and hands the store one
:class:`~ledgerflow.ledger.audit.RepairWrite`, applied in one transaction with its audit record
only if the planned state still holds. Every refusal (not authorized, forbidden, stale) is
appended to the audit log in a transaction of its own; a dry run writes nothing; a repeat of a
repair whose result is still in place is recorded as a no-op and changes nothing.

Example::

    repairs = Repairs(store, Authority.from_environment())
    request = RepairRequest(kind=RepairKind.RESUME, instance_id=iid, actor="alice", reason="...")
    print("\\n".join(repairs.plan(request).plan.describe()))
    result = repairs.apply(request)
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledgerflow.errors import (
    NotAuthorizedError,
    OperatorError,
    RepairRefusedError,
    StalePreconditionError,
)
from ledgerflow.ledger.audit import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    RepairWrite,
)
from ledgerflow.model.authority import RECONCILER, checked_actor
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import Generation, InstanceId, StepSeq
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.repair import (
    RepairArgs,
    RepairKind,
    RepairPlan,
    fingerprint,
    target_of,
)
from ledgerflow.model.repair_rules import plan_repair
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.snapshot import Snapshot, read_snapshot, repair_writes
from ledgerflow.runtime import journal_log
from ledgerflow.runtime.clock import Clock, SystemClock
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.storage.store import OperatorStore

__all__ = ["RepairKind", "RepairRequest", "RepairResult", "Repairs"]

log = logging.getLogger("ledgerflow.repairs")


@dataclass(frozen=True, kw_only=True)
class RepairRequest:
    kind: RepairKind
    instance_id: InstanceId
    actor: str
    reason: str
    seq: int | None = None
    applied: bool | None = None
    evidence: Any = None
    result: Any = None
    status: InstanceStatus | None = None
    compensate: bool = True
    resume: bool = False


@dataclass(frozen=True, kw_only=True)
class RepairResult:
    outcome: str  # "applied" | "no-op" | "dry-run"
    plan: RepairPlan
    audit_id: int | None
    message: str


# Whom a request without an identity is recorded against when it is refused.
ANONYMOUS = "(anonymous)"


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="seconds")


def _applied(earlier: AuditRecord) -> str:
    return f"already applied by {earlier.actor} at {_when(earlier.at)} (audit #{earlier.audit_id})"


@dataclass(frozen=True, slots=True)
class Repeat:
    """A repair asked for again after it was applied: the earlier record and what to say."""

    earlier: AuditRecord
    text: str


class Repairs:
    """Audited repairs on one store, under one authority policy (the operators' service,
    :class:`~ledgerflow.operators.service.Operations`, is how the faces reach them)."""

    def __init__(
        self,
        store: OperatorStore,
        authority: Authority,
        *,
        clock: Clock | None = None,
        codec: Codec | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.authority = authority
        self.clock = clock or SystemClock()
        self.codec = codec or JSON
        # An UNKNOWN outcome a repair settles is counted here (how: operator, reconciliation).
        self.metrics = metrics

    # -- the two entry points ----------------------------------------------------------------

    def plan(self, request: RepairRequest) -> RepairResult:
        """Dry run: authority and state are checked, the plan is returned, nothing is written."""
        args = self._args(request)
        self.authority.grant_for(request.actor, request.kind)
        snapshot = read_snapshot(self.store, request.instance_id, now=self.clock.now())
        plan = self._plan_or_repeat(args, request, snapshot, shown=False)
        if isinstance(plan, Repeat):
            return RepairResult(
                outcome="dry-run",
                plan=self._nothing(args, snapshot, plan),
                audit_id=None,
                message=f"dry run: {plan.text}; applying it would change nothing",
            )
        return RepairResult(
            outcome="dry-run", plan=plan, audit_id=None, message="dry run: nothing was changed"
        )

    def apply(
        self,
        request: RepairRequest,
        *,
        planned: RepairPlan | None = None,
        planned_generation: int | None = None,
    ) -> RepairResult:
        """Apply the repair in one transaction with its audit record.

        ``planned`` is a plan shown earlier (a dry run): it is applied only if planning now gives
        exactly the same plan, else :class:`StalePreconditionError` (someone acted first).
        ``planned_generation`` is the generation such a plan was made at (all the console and
        an API client keep of it): the repair applies only while the instance is still there.
        Either way a refusal, a stale plan too, is on the record like any other.
        """
        try:
            args = self._args(request)
        except NotAuthorizedError as exc:
            # No identity: still on the record, attributed to nobody.
            anonymous = dataclasses.replace(request, actor=ANONYMOUS)
            self._refused(self._args(anonymous), anonymous, None, None, None, exc)
            raise
        role: str | None = None
        plan: RepairPlan | None = None
        snapshot: Snapshot | None = None
        try:
            role = self.authority.grant_for(request.actor, request.kind)
            snapshot = read_snapshot(self.store, request.instance_id, now=self.clock.now())
            if planned is not None:
                self._still_current(request, snapshot, planned)
            if (
                planned_generation is not None
                and snapshot.instance.generation != planned_generation
            ):
                self._stale(request, planned_generation)
            planning = self._plan_or_repeat(args, request, snapshot, shown=planned is not None)
            if isinstance(planning, Repeat):
                return self._no_op(args, request, role, snapshot, planning)
            plan = planning
            if planned is not None and planned != plan:
                self._stale(request, planned.generation)
            audit_id = self._write(args, request, role, snapshot, plan)
        except OperatorError as exc:
            self._refused(args, request, role, snapshot, plan, exc)
            raise
        self._count_settled(args, request, snapshot)
        log.warning(
            "repair %s applied by %s (%s) as audit #%s: %s",
            args.kind.value,
            args.actor,
            self.authority.allowed_by(role),
            audit_id,
            args.reason,
            extra=journal_log.identity(snapshot.instance, step=request.seq),
        )
        return RepairResult(
            outcome="applied",
            plan=plan,
            audit_id=audit_id,
            message=f"applied as audit #{audit_id} by {args.actor} "
            f"({self.authority.allowed_by(role)})",
        )

    def refused(
        self, request: RepairRequest, error: OperatorError, *, role: str | None = None
    ) -> None:
        """Put on the record a repair its caller refused before asking for it here (the
        principal's ``role`` is below any repair's): recorded as this tool records its own."""
        self._refused(self._args(request), request, role, None, None, error)

    def _count_settled(self, args: RepairArgs, request: RepairRequest, snapshot: Snapshot) -> None:
        if self.metrics is None or args.kind is not RepairKind.RESOLVE_EFFECT or args.seq is None:
            return
        before = snapshot.journal.effects.get(StepSeq(args.seq))
        if before is not None and before.state is EffectState.UNKNOWN:
            how = "reconciliation" if args.actor == RECONCILER else "operator"
            self.metrics.settled(before.participant, before.operation, how=how)

    # -- planning ----------------------------------------------------------------------------

    def _args(self, request: RepairRequest) -> RepairArgs:
        encode = self.codec.encode
        return RepairArgs(
            kind=request.kind,
            actor=checked_actor(request.actor),
            reason=request.reason.strip(),
            seq=request.seq,
            applied=request.applied,
            evidence_text=encode(request.evidence) if request.evidence is not None else None,
            # A substitute or forced result may be null itself; what is absent is "not given".
            result_text=self._result_text(request),
            status=request.status,
            compensate=request.compensate,
            resume=request.resume,
        )

    def _result_text(self, request: RepairRequest) -> str | None:
        if request.kind is RepairKind.SKIP_STEP:
            return self.codec.encode(request.result)
        return self.codec.encode(request.result) if request.result is not None else None

    def _fingerprint(self, args: RepairArgs, request: RepairRequest) -> str:
        arguments = {
            "applied": args.applied,
            "evidence": args.evidence_text,
            "result": args.result_text,
            "status": args.status.value if args.status else None,
            "compensate": args.compensate,
            "resume": args.resume,
        }
        return fingerprint(
            kind=args.kind,
            instance_id=request.instance_id,
            target=target_of(args),
            arguments=arguments,
        )

    def _plan_or_repeat(
        self, args: RepairArgs, request: RepairRequest, snapshot: Snapshot, *, shown: bool
    ) -> RepairPlan | Repeat:
        """The plan of this repair, or the repeat it is of an applied one.

        The same repair (kind, instance, target, arguments) applied before is repeated when its
        result is still in place (nothing has moved the instance since: same generation), or
        when the instance has moved on from it and the repair no longer applies: what it asked
        for was carried out then, so a repeat (a script run twice, a second operator) is a
        no-op that says so rather than a refusal. One that applies again (a retried step that
        failed again) is planned as a new repair. A plan ``shown`` earlier (a dry run) is
        never a repeat: it is applied as planned or refused.
        """
        earlier = self.store.last_applied_repair(self._fingerprint(args, request))
        instance = snapshot.ledger.instance
        if earlier is not None and not shown and earlier.generation_after == instance.generation:
            return Repeat(
                earlier, f"{_applied(earlier)} and nothing has changed the instance since"
            )
        try:
            return plan_repair(snapshot.ledger, args)
        except RepairRefusedError as exc:
            if earlier is None:
                raise
            if not shown:
                return Repeat(
                    earlier,
                    f"{_applied(earlier)}; the instance has moved on since (now "
                    f"{instance.status.value}, generation {instance.generation}) and the "
                    f"repair no longer applies: {exc.message}",
                )
            # The refusal keeps its own class and code (a caller may catch the subclass).
            raise dataclasses.replace(
                exc,
                message=f"{exc.message} (the same repair was applied as audit "
                f"#{earlier.audit_id} by {earlier.actor} at {_when(earlier.at)}; the instance "
                "has moved on since)",
            ) from None

    def _nothing(self, args: RepairArgs, snapshot: Snapshot, repeat: Repeat) -> RepairPlan:
        instance = snapshot.ledger.instance
        return RepairPlan(
            kind=args.kind,
            instance_id=instance.instance_id,
            target=target_of(args),
            generation=instance.generation,
            status=instance.status,
            fence=False,
            notes=(f"{repeat.text}: nothing to change",),
        )

    def _still_current(
        self, request: RepairRequest, snapshot: Snapshot, planned: RepairPlan
    ) -> None:
        instance = snapshot.instance
        if (instance.generation, instance.status) != (planned.generation, planned.status):
            self._stale(request, planned.generation)

    def _stale(self, request: RepairRequest, generation: int) -> None:
        raise StalePreconditionError(
            f"the instance changed since the plan was made at generation {generation}"
            f"{self._changed_by(request.instance_id, generation)}; plan again and "
            "review the new plan",
            instance_id=request.instance_id,
        )

    def _changed_by(self, instance_id: InstanceId, generation: int) -> str:
        later = [
            r
            for r in self.store.audit_records(AuditQuery(instance_id=instance_id, limit=20))
            if r.outcome == "applied" and (r.generation_before or 0) >= generation
        ]
        if not later:
            return ""
        r = later[0]
        return f" (audit #{r.audit_id}: {r.kind} by {r.actor} at {_when(r.at)})"

    # -- writing -----------------------------------------------------------------------------

    def _entry(
        self,
        args: RepairArgs,
        request: RepairRequest,
        *,
        role: str | None,
        outcome: str,
        plan: RepairPlan | None,
        refusal: str | None = None,
        generation: int | None = None,
    ) -> AuditEntry:
        return AuditEntry(
            actor=args.actor,
            role=role,
            kind=args.kind.value,
            instance_id=request.instance_id,
            target=target_of(args),
            fingerprint=self._fingerprint(args, request),
            outcome=outcome,
            reason=args.reason or "(none given)",
            evidence=args.evidence_text,
            plan=json.dumps(plan.to_json() if plan else {}, sort_keys=True),
            refusal=refusal,
            generation_before=Generation(generation) if generation is not None else None,
            generation_after=Generation(generation) if generation is not None else None,
        )

    def _write(
        self,
        args: RepairArgs,
        request: RepairRequest,
        role: str,
        snapshot: Snapshot,
        plan: RepairPlan,
    ) -> int:
        now = self.clock.now()
        repair = RepairWrite(
            instance_id=request.instance_id,
            expected_generation=snapshot.instance.generation,
            expected_status=snapshot.instance.status,
            fence=plan.fence,
            writes=repair_writes(snapshot, plan, now=now),
            cancel=plan.cancel,
            audit=self._entry(args, request, role=role, outcome="applied", plan=plan),
        )
        # Where the database measures leases, it decides whether one has lapsed.
        lease_now = None if self.store.database_clock else now
        return self.store.apply_repair(repair, now=now, lease_now=lease_now)

    def _no_op(
        self,
        args: RepairArgs,
        request: RepairRequest,
        role: str,
        snapshot: Snapshot,
        repeat: Repeat,
    ) -> RepairResult:
        plan = self._nothing(args, snapshot, repeat)
        entry = self._entry(
            args,
            request,
            role=role,
            outcome="no-op",
            plan=plan,
            generation=snapshot.instance.generation,
        )
        audit_id = self.store.append_audit(entry, now=self.clock.now())
        return RepairResult(
            outcome="no-op",
            plan=plan,
            audit_id=audit_id,
            message=f"no-op: {repeat.text} (recorded as audit #{audit_id})",
        )

    def _refused(
        self,
        args: RepairArgs,
        request: RepairRequest,
        role: str | None,
        snapshot: Snapshot | None,
        plan: RepairPlan | None,
        exc: OperatorError,
    ) -> None:
        entry = self._entry(
            args,
            request,
            role=role,
            outcome="refused",
            plan=plan,
            refusal=str(exc),
            generation=snapshot.instance.generation if snapshot else None,
        )
        self.store.append_audit(entry, now=self.clock.now())
