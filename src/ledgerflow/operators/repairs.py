"""Audited repairs: plan (dry run) and apply, on a store (internal).

:class:`Repairs` checks the actor's authority, reads a snapshot of the instance, has
:mod:`ledgerflow.model.repair_rules` plan the repair, and hands the store one
:class:`~ledgerflow.storage.audit.RepairWrite`, applied in one transaction with its audit record
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
from ledgerflow.storage.audit import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    CancelRequest,
    RepairWrite,
)
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
        self.authority.role_for(request.actor, request.kind)
        snapshot = read_snapshot(self.store, request.instance_id, now=self.clock.now())
        repeat = self._repeat_of(args, request, snapshot)
        if repeat is not None:
            return RepairResult(
                outcome="dry-run",
                plan=self._nothing(args, snapshot, repeat),
                audit_id=None,
                message=f"dry run: {self._repeat_text(repeat)}; applying it would change nothing",
            )
        plan = self._planned(args, request, snapshot, None)
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
            role = self.authority.role_for(request.actor, request.kind)
            snapshot = read_snapshot(self.store, request.instance_id, now=self.clock.now())
            if planned is not None:
                self._still_current(request, snapshot, planned)
            if (
                planned_generation is not None
                and snapshot.instance.generation != planned_generation
            ):
                self._stale(request, planned_generation)
            repeat = self._repeat_of(args, request, snapshot)
            if repeat is not None and planned is None:
                return self._no_op(args, request, role, snapshot, repeat)
            plan = self._planned(args, request, snapshot, repeat)
            if planned is not None and planned != plan:
                self._stale(request, planned.generation)
            audit_id = self._write(args, request, role, snapshot, plan)
        except OperatorError as exc:
            self._refused(args, request, role, snapshot, plan, exc)
            raise
        self._count_settled(args, request, snapshot)
        log.warning(
            "repair %s applied by %s (role %s) as audit #%s: %s",
            args.kind.value,
            args.actor,
            role,
            audit_id,
            args.reason,
            extra=journal_log.identity(snapshot.instance, step=request.seq),
        )
        return RepairResult(
            outcome="applied",
            plan=plan,
            audit_id=audit_id,
            message=f"applied as audit #{audit_id} by {args.actor} (role {role})",
        )

    def refused(self, request: RepairRequest, error: OperatorError) -> None:
        """Put on the record a repair its caller refused before asking for it here (the
        principal's role is below any repair's): recorded as this tool records its own."""
        self._refused(self._args(request), request, None, None, None, error)

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

    def _repeat_of(
        self, args: RepairArgs, request: RepairRequest, snapshot: Snapshot
    ) -> AuditRecord | None:
        """The applied repair this one repeats, if its result is still in place (nothing has
        moved the instance since: same generation)."""
        previous = self.store.last_applied_repair(self._fingerprint(args, request))
        if previous is None or previous.generation_after != snapshot.ledger.instance.generation:
            return None
        return previous

    def _planned(
        self,
        args: RepairArgs,
        request: RepairRequest,
        snapshot: Snapshot,
        earlier: AuditRecord | None,
    ) -> RepairPlan:
        try:
            return plan_repair(snapshot.ledger, args)
        except RepairRefusedError as exc:
            previous = earlier or self.store.last_applied_repair(self._fingerprint(args, request))
            if previous is None:
                raise
            raise RepairRefusedError(
                f"{exc.message} (the same repair was applied as audit #{previous.audit_id} by "
                f"{previous.actor} at {_when(previous.at)}; the instance has moved on since)",
                instance_id=request.instance_id,
            ) from None

    def _nothing(self, args: RepairArgs, snapshot: Snapshot, repeat: AuditRecord) -> RepairPlan:
        instance = snapshot.ledger.instance
        return RepairPlan(
            kind=args.kind,
            instance_id=instance.instance_id,
            target=target_of(args),
            generation=instance.generation,
            status=instance.status,
            fence=False,
            notes=(f"{self._repeat_text(repeat)}: nothing to change",),
        )

    @staticmethod
    def _repeat_text(repeat: AuditRecord) -> str:
        return (
            f"already applied by {repeat.actor} at {_when(repeat.at)} (audit #{repeat.audit_id}) "
            "and nothing has changed the instance since"
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
            cancel=(
                CancelRequest(reason=plan.cancel.reason, compensate=plan.cancel.compensate)
                if plan.cancel
                else None
            ),
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
        repeat: AuditRecord,
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
            message=f"no-op: {self._repeat_text(repeat)} (recorded as audit #{audit_id})",
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
