"""The operators' service: the one front door the faces call (internal).

The ``ledgerflow`` command calls it now, the HTTP endpoint and a console too: reading instances
and their ledgers, cancelling and signalling them, the attention queue and the stuck-work scan,
audited repairs (plan and apply), the audit log, and reconciliation with its runs. Whoever asks,
the same rules answer in the same words, because the service decides nothing itself: it is the
engine (:class:`Operations` is a :class:`~ledgerflow.runtime.engine.SyncEngine`: ``list``,
``detail``, ``wait``, ``result``, ``cancel``, ``signal``, ``complete_effect`` are the engine's
own) with the operators' tools beside it (:mod:`~ledgerflow.operators.attention`,
:mod:`~ledgerflow.operators.repairs`, :mod:`~ledgerflow.operators.reconcile`). A face imports
its answers' types from here, never from storage.

:class:`Operations` is for synchronous code;
:class:`~ledgerflow.operators.async_service.AsyncOperations` is the same for asyncio (an
:class:`~ledgerflow.runtime.engine.Engine`).

A store named by its URL is opened as it is (``migrate=False``): never created, never migrated,
so a mistyped ``--db`` is an error naming it, not a new, empty journal.

Example::

    with Operations("sqlite:///orders.db", authority=Authority.from_environment()) as ops:
        for item in ops.attention(AttentionQuery(reason="poison_step")):
            print(item.since, item.instance_id, item.reason)
        request = RepairRequest(
            kind=RepairKind.RESUME, instance_id=iid, actor="alice", reason="input fixed"
        )
        print("\\n".join(ops.plan(request).plan.describe()))
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import BusinessKey, TenantId
from ledgerflow.model.repair import RepairKind
from ledgerflow.operators.attention import AttentionItem, attention
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.reconcile import reconcile
from ledgerflow.operators.repairs import RepairRequest, RepairResult, Repairs
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.runtime.detection import ScanReport, bounds_from_environment, scan
from ledgerflow.runtime.engine import Delivered, DeliveryOutcome, InstanceDetail, SyncEngine
from ledgerflow.runtime.store_thread import AsyncStore
from ledgerflow.storage import open_store
from ledgerflow.storage.attention import AttentionFlag, AttentionQuery
from ledgerflow.storage.audit import AuditQuery, AuditRecord
from ledgerflow.storage.migrations import MigrationStatus
from ledgerflow.storage.reconciliation import ReconciliationRun
from ledgerflow.storage.records import InstanceRecord
from ledgerflow.storage.store import Store
from ledgerflow.storage.url import migration_status

__all__ = [
    "AttentionFlag",
    "AttentionItem",
    "AttentionQuery",
    "AuditQuery",
    "AuditRecord",
    "Delivered",
    "DeliveryOutcome",
    "InstanceDetail",
    "InstanceReport",
    "MigrationStatus",
    "Operations",
    "ReconciliationRun",
    "RepairKind",
    "RepairRequest",
    "RepairResult",
    "ScanReport",
    "migrate_journal",
    "migration_status",
]

# The audit records ``show`` lists under an instance's timeline, at most.
SHOW_AUDIT_MAX = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceReport:
    """What an operator sees of one instance (``ledgerflow show``): its ledgers, the audit
    records of its repairs and its open attention flags."""

    detail: InstanceDetail
    audit: list[AuditRecord]
    flags: list[AttentionFlag]


def migrate_journal(url: str) -> MigrationStatus:
    """Bring the journal at ``url`` to this Ledgerflow's schema (creating a missing SQLite
    journal); return where it stood before."""
    before = migration_status(url)
    if before.pending:
        open_store(url, migrate=True).close()
    return before


class Operations(SyncEngine):
    """What an operator may do to one store, for synchronous code (the CLI, web handlers).

    ``authority`` decides who may repair (default: ``LEDGERFLOW_AUTHORITY``, read when first
    needed, so that reading never depends on it). ``migrate`` says how a store named by its URL
    is opened: ``False`` as it is (every operator command), ``None`` as the URL says (a server's
    own journal, created and migrated unless ``?migrate=false``).
    """

    def __init__(
        self,
        store: Store | str,
        *,
        authority: Authority | None = None,
        migrate: bool | None = False,
        clock: Clock = SYSTEM_CLOCK,
        codec: Codec = JSON,
    ) -> None:
        opened = open_store(store, migrate=migrate) if isinstance(store, str) else store
        # Reading, cancelling and signalling need no workflow code: an empty registry pins
        # nothing and starts nothing.
        super().__init__(opened, Registry(), codec=codec)
        self._authority = authority
        self._clock = clock
        self._codec = codec

    @property
    def authority(self) -> Authority:
        if self._authority is None:
            self._authority = Authority.from_environment()
        return self._authority

    # -- instances, beside the engine's own reads --------------------------------------------

    def show(self, instance_id: str) -> InstanceReport:
        """An instance's ledgers with its repairs' audit records and its open flags."""
        detail = self.detail(instance_id)
        found = detail.instance.instance_id
        return InstanceReport(
            detail=detail,
            audit=self.store.audit_records(AuditQuery(instance_id=found, limit=SHOW_AUDIT_MAX)),
            flags=self.store.open_flags(found),
        )

    def find(self, *, tenant: TenantId, workflow: str, key: BusinessKey) -> InstanceRecord | None:
        """The instance a business key started, if any."""
        return self.store.find_instance(tenant=tenant, workflow_name=workflow, business_key=key)

    def attention(self, query: AttentionQuery | None = None) -> list[AttentionItem]:
        """Parked instances and open flags, oldest first (no query: the whole queue)."""
        return attention(self.store, query)

    def scan(self, *, detected_by: str, bounds: DetectionBounds | None = None) -> ScanReport:
        """Run the stuck-work scan now, as workers do periodically (default bounds:
        ``LEDGERFLOW_DETECTION``)."""
        bounds = bounds or bounds_from_environment()
        return scan(self.store, bounds, now=self._clock.now(), detected_by=detected_by)

    # -- repairs and their audit -------------------------------------------------------------

    def plan(self, request: RepairRequest) -> RepairResult:
        """The repair's dry run: authority and state are checked, nothing is written."""
        return self.repairs().plan(request)

    def apply(self, request: RepairRequest) -> RepairResult:
        """Apply the repair in one transaction with its audit record (or refuse, on record)."""
        return self.repairs().apply(request)

    def audit(self, query: AuditQuery | None = None) -> list[AuditRecord]:
        """The audit records a query selects, oldest first (no query: the newest of all)."""
        return self.store.audit_records(query)

    def repairs(self) -> Repairs:
        """The audited repair tool on this store, under this service's authority."""
        return Repairs(self.store, self.authority, clock=self._clock, codec=self._codec)

    # -- reconciliation ------------------------------------------------------------------------

    def reconcile(
        self,
        registry: Registry,
        *,
        limit: int = limits.RECONCILE_LIMIT_DEFAULT,
        max_corrections: int = limits.RECONCILE_CORRECTIONS_DEFAULT,
        dry_run: bool = False,
    ) -> ReconciliationRun:
        """One bounded reconciliation with the participants of ``registry`` (their lookups),
        attributed to the reconciler; its store calls run on a store thread of its own."""
        thread = AsyncStore(self.store)
        try:
            return asyncio.run(
                reconcile(
                    thread,
                    registry,
                    repairs=self.repairs(),
                    limit=limit,
                    max_corrections=max_corrections,
                    clock=self._clock,
                    dry_run=dry_run,
                )
            )
        finally:
            thread.stop()

    def reconciliations(self, *, limit: int = 20) -> list[ReconciliationRun]:
        """The newest ``limit`` reconciliation runs, newest first."""
        return self.store.reconciliations(limit=limit)
