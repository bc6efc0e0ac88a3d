"""The operators' service for asyncio code, on an engine's store (internal).

:class:`AsyncOperations` offers what :class:`~ledgerflow.operators.service.Operations` offers,
awaitable, for code that already runs an :class:`~ledgerflow.runtime.engine.Engine` (a worker's
periodic reconciliation, a console served by asyncio). It shares the engine's store and its
store thread: what the engine answers (instances, their results) it asks the engine; the
operator's own calls and every change (starts, cancels, signals, callbacks, repairs: with the
role check and the audit record the synchronous service makes, in the change's transaction)
run the synchronous service's on the store thread, as every call on that store does, and the
engine's workers are then told of what arrived. Closing the engine closes both.

Example::

    async with Engine("sqlite:///orders.db", registry) as engine:
        operations = AsyncOperations(engine)
        worker = engine.worker(
            periodic=[operations.reconcile_task(registry, interval_seconds=600)]
        )
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ledgerflow import limits
from ledgerflow.ledger.attention import AttentionQuery
from ledgerflow.ledger.audit import AuditQuery, AuditRecord
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.definition import Registry
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import BusinessKey, TenantId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.operators.attention import AttentionItem
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.reconcile import reconcile
from ledgerflow.operators.repairs import RepairRequest, RepairResult
from ledgerflow.operators.service import (
    InstanceReport,
    Operations,
    Principal,
    ScopedOperations,
    local_actor,
)
from ledgerflow.runtime.detection import ScanReport
from ledgerflow.runtime.engine import Delivered, Engine, InstanceDetail, Started
from ledgerflow.runtime.periodic import PeriodicTask

__all__ = ["AsyncOperations"]

T = TypeVar("T")


class AsyncOperations:
    """What an operator may do to an engine's store, for asyncio code."""

    def __init__(self, engine: Engine, *, authority: Authority | None = None) -> None:
        self._engine = engine
        self._thread = engine.store_thread
        # The same calls as the synchronous service's, on the engine's store (never closed
        # here: the engine owns it).
        self._operations = Operations(
            engine.store,
            authority=authority,
            registry=engine.registry,
            clock=engine.clock,
            codec=engine.codec,
        )

    @property
    def authority(self) -> Authority:
        return self._operations.authority

    async def as_principal(self, principal: Principal, call: Callable[[ScopedOperations], T]) -> T:
        """``call`` on the service as ``principal`` sees it (its tenant, its role, its name on
        the audit record: :meth:`Operations.acting_as`), on the store thread.

        Example::

            page = await operations.as_principal(principal, lambda ops: ops.page(query))
        """
        scoped = self._operations.acting_as(principal)
        return await self._thread.call(call, scoped)

    # -- instances: the engine answers ---------------------------------------------------------

    async def detail(self, instance_id: str) -> InstanceDetail:
        return await self._engine.detail(instance_id)

    async def show(self, instance_id: str) -> InstanceReport:
        return await self._thread.call(self._operations.show, instance_id)

    async def find(
        self, *, tenant: TenantId, workflow: str, key: BusinessKey
    ) -> InstanceRecord | None:
        return await self._thread.call(
            self._operations.find, tenant=tenant, workflow=workflow, key=key
        )

    async def wait(self, instance_id: str, *, timeout: float) -> InstanceRecord:
        return await self._engine.wait(instance_id, timeout=timeout)

    async def result(self, instance_id: str, *, timeout: float = 0.0) -> Any:
        return await self._engine.result(instance_id, timeout=timeout)

    # -- changes: the synchronous service's, with its role check and audit, on the store thread

    async def start(
        self,
        workflow: str,
        *,
        key: str,
        input: Any = None,
        version: int | None = None,
        tenant: str | None = None,
        actor: str | None = None,
    ) -> Started:
        """Start (or find) the instance of a business key (:meth:`Operations.start`: recorded
        against ``actor``, default :func:`~ledgerflow.operators.service.local_actor`). The
        engine's workers find it at their next claim."""
        started: Started = await self._thread.call(
            self._operations.start,
            workflow,
            key=key,
            input=input,
            version=version,
            tenant=tenant,
            actor=actor,
        )
        return started

    async def cancel(
        self,
        instance_id: str,
        *,
        reason: str,
        compensate: bool = True,
        actor: str | None = None,
    ) -> InstanceRecord:
        """Ask for the instance to be cancelled (:meth:`Operations.cancel`: ``actor``, default
        :func:`~ledgerflow.operators.service.local_actor`, must hold a role that allows
        ``cancel``; audited in the request's transaction); the engine's worker that drives it
        stops before its next step."""
        record: InstanceRecord = await self._thread.call(
            self._operations.cancel,
            instance_id,
            reason=reason,
            actor=actor or local_actor(),
            compensate=compensate,
        )
        self._engine.notice_cancel(record.instance_id)
        return record

    async def signal(
        self,
        instance_id: str,
        name: str,
        *,
        event_id: str,
        payload: Any = None,
        sender: str | None = None,
        for_step: int | None = None,
        run: int | None = None,
        actor: str | None = None,
    ) -> Delivered:
        """Deliver a signal, callback or approval (:meth:`Operations.signal`: audited against
        ``actor`` in the delivery's transaction); a waiting instance of the engine is woken."""
        delivered: Delivered = await self._thread.call(
            self._operations.signal,
            instance_id,
            name,
            event_id=event_id,
            payload=payload,
            sender=sender,
            for_step=for_step,
            run=run,
            actor=actor,
        )
        self._engine.notice_delivery(delivered)
        return delivered

    async def complete_effect(
        self,
        idempotency_key: str,
        *,
        applied: bool,
        evidence: Any = None,
        reason: str | None = None,
        event_id: str | None = None,
        actor: str | None = None,
    ) -> Delivered:
        """A participant's callback for an asynchronous effect (:meth:`Operations.
        complete_effect`, audited); the waiting step is woken."""
        delivered: Delivered = await self._thread.call(
            self._operations.complete_effect,
            idempotency_key,
            applied=applied,
            evidence=evidence,
            reason=reason,
            event_id=event_id,
            actor=actor,
        )
        self._engine.notice_delivery(delivered)
        return delivered

    # -- the operator's own calls, on the store thread -----------------------------------------

    async def attention(self, query: AttentionQuery | None = None) -> list[AttentionItem]:
        return await self._thread.call(self._operations.attention, query)

    async def scan(self, *, detected_by: str, bounds: DetectionBounds | None = None) -> ScanReport:
        return await self._thread.call(
            self._operations.scan, detected_by=detected_by, bounds=bounds
        )

    async def workers(self, *, bounds: DetectionBounds | None = None) -> list[WorkerRecord]:
        """The live workers, with what each serves (see :meth:`Operations.workers`)."""
        return await self._thread.call(self._operations.workers, bounds=bounds)

    async def plan(self, request: RepairRequest) -> RepairResult:
        return await self._thread.call(self._operations.plan, request)

    async def apply(self, request: RepairRequest) -> RepairResult:
        return await self._thread.call(self._operations.apply, request)

    async def audit(self, query: AuditQuery | None = None) -> list[AuditRecord]:
        return await self._thread.call(self._operations.audit, query)

    async def reconcile(
        self,
        registry: Registry,
        *,
        limit: int = limits.RECONCILE_LIMIT_DEFAULT,
        max_corrections: int = limits.RECONCILE_CORRECTIONS_DEFAULT,
        dry_run: bool = False,
    ) -> ReconciliationRun:
        """One bounded reconciliation with the participants of ``registry``, attributed to the
        reconciler, its store calls on the engine's store thread."""
        return await reconcile(
            self._thread,
            registry,
            repairs=self._operations.repairs(),
            limit=limit,
            max_corrections=max_corrections,
            clock=self._engine.clock,
            dry_run=dry_run,
        )

    def reconcile_task(
        self,
        registry: Registry,
        *,
        interval_seconds: float,
        limit: int = limits.RECONCILE_LIMIT_DEFAULT,
        max_corrections: int = limits.RECONCILE_CORRECTIONS_DEFAULT,
    ) -> PeriodicTask:
        """Reconciliation as a worker's periodic task (``engine.worker(periodic=[...])``). The
        authority is read now, so that a wrong one stops the worker from starting."""
        repairs = self._operations.repairs()

        async def run() -> None:
            finished = await reconcile(
                self._thread,
                registry,
                repairs=repairs,
                limit=limit,
                max_corrections=max_corrections,
                clock=self._engine.clock,
            )
            if self._engine.metrics is not None:
                self._engine.metrics.reconciled(
                    matched=finished.matched,
                    corrected=finished.corrected,
                    escalated=finished.escalated,
                    unreachable=finished.unreachable,
                )

        return PeriodicTask(name="reconcile", interval_seconds=interval_seconds, run=run)

    async def reconciliations(self, *, limit: int = 20) -> list[ReconciliationRun]:
        return await self._thread.call(self._operations.reconciliations, limit=limit)

    # Last in the class: below it, ``list`` in an annotation would name this method.
    async def list(
        self,
        *,
        status: InstanceStatus | None = None,
        workflow: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        return await self._engine.list(status=status, workflow=workflow, tenant=tenant, limit=limit)
