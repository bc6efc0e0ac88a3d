"""The operators' service for asyncio code (internal).

:class:`AsyncOperations` is an :class:`~ledgerflow.runtime.engine.Engine` (its reads, cancels,
signals and workers are the engine's own) with what
:class:`~ledgerflow.operators.service.Operations` adds beside the engine, awaitable: the
attention queue and the scan, audited repairs, the audit log and reconciliation. Those run the
synchronous service's calls on the engine's store thread, as every call on that store does. It
is what asyncio code that operates on a journal uses: a worker that reconciles periodically, a
console served by asyncio.

Example::

    async with AsyncOperations("sqlite:///orders.db", registry) as engine:
        task = engine.reconcile_task(registry, interval_seconds=600)
        await engine.worker(periodic=[task]).run()
"""

from __future__ import annotations

from ledgerflow import limits
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import BusinessKey, TenantId
from ledgerflow.operators.attention import AttentionItem
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.reconcile import reconcile
from ledgerflow.operators.repairs import RepairRequest, RepairResult
from ledgerflow.operators.service import InstanceReport, Operations
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.runtime.detection import ScanReport
from ledgerflow.runtime.engine import Engine
from ledgerflow.runtime.periodic import PeriodicTask
from ledgerflow.storage.attention import AttentionQuery
from ledgerflow.storage.audit import AuditQuery, AuditRecord
from ledgerflow.storage.reconciliation import ReconciliationRun
from ledgerflow.storage.records import InstanceRecord
from ledgerflow.storage.store import Store

__all__ = ["AsyncOperations"]


class AsyncOperations(Engine):
    """What an operator may do to one store, for asyncio code: the engine, and beside it the
    operators' calls. ``registry`` is the workflow code its workers run (none: an operator's
    engine that reads, repairs and reconciles, and starts nothing)."""

    def __init__(
        self,
        store: Store | str,
        registry: Registry | None = None,
        *,
        authority: Authority | None = None,
        codec: Codec = JSON,
        clock: Clock = SYSTEM_CLOCK,
        inline: bool = False,
    ) -> None:
        super().__init__(store, registry or Registry(), codec=codec, clock=clock, inline=inline)
        # The synchronous service's calls, on this engine's store (closed with the engine).
        self._operations = Operations(self.store, authority=authority, clock=clock, codec=codec)

    @property
    def authority(self) -> Authority:
        return self._operations.authority

    # -- instances, beside the engine's own reads --------------------------------------------

    async def show(self, instance_id: str) -> InstanceReport:
        return await self.store_thread.call(self._operations.show, instance_id)

    async def find(
        self, *, tenant: TenantId, workflow: str, key: BusinessKey
    ) -> InstanceRecord | None:
        return await self.store_thread.call(
            self._operations.find, tenant=tenant, workflow=workflow, key=key
        )

    # -- what needs a person, repairs and their audit ----------------------------------------

    async def attention(self, query: AttentionQuery | None = None) -> list[AttentionItem]:
        return await self.store_thread.call(self._operations.attention, query)

    async def scan(self, *, detected_by: str, bounds: DetectionBounds | None = None) -> ScanReport:
        return await self.store_thread.call(
            self._operations.scan, detected_by=detected_by, bounds=bounds
        )

    async def plan(self, request: RepairRequest) -> RepairResult:
        return await self.store_thread.call(self._operations.plan, request)

    async def apply(self, request: RepairRequest) -> RepairResult:
        return await self.store_thread.call(self._operations.apply, request)

    async def audit(self, query: AuditQuery | None = None) -> list[AuditRecord]:
        return await self.store_thread.call(self._operations.audit, query)

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
            self.store_thread,
            registry,
            repairs=self._operations.repairs(),
            limit=limit,
            max_corrections=max_corrections,
            clock=self.clock,
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
            await reconcile(
                self.store_thread,
                registry,
                repairs=repairs,
                limit=limit,
                max_corrections=max_corrections,
                clock=self.clock,
            )

        return PeriodicTask(name="reconcile", interval_seconds=interval_seconds, run=run)

    async def reconciliations(self, *, limit: int = 20) -> list[ReconciliationRun]:
        return await self.store_thread.call(self._operations.reconciliations, limit=limit)
