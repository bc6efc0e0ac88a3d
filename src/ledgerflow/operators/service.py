"""The operators' service: the one front door the faces call (internal).

The ``ledgerflow`` command calls it now, the HTTP endpoint and a console too: reading instances
and their ledgers, cancelling and signalling them, the attention queue and the stuck-work scan,
audited repairs (plan and apply), the audit log, and reconciliation with its runs. Whoever asks,
the same rules answer in the same words, because the service decides nothing itself: each call
is the engine's (:class:`~ledgerflow.runtime.engine.SyncEngine`) or one operator tool's
(:mod:`~ledgerflow.operators.attention`, :mod:`~ledgerflow.operators.repairs`,
:mod:`~ledgerflow.operators.reconcile`). A face imports its answers' types from here, never
from storage.

:class:`Operations` is for synchronous code; :class:`~ledgerflow.operators.async_service.
AsyncOperations` is the same for asyncio, on an engine's store.

A store named by its URL is opened as it is (``migrate=False``): never created, never migrated,
so a mistyped ``--db`` is an error naming it, not a new, empty journal.

Example::

    with Operations("sqlite:///orders.db", authority=Authority.from_environment()) as ops:
        for item in ops.attention(reason="poison_step"):
            print(item.since, item.instance_id, item.reason)
        request = RepairRequest(
            kind=RepairKind.RESUME, instance_id=iid, actor="alice", reason="input fixed"
        )
        print("\\n".join(ops.plan(request).plan.describe()))
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from ledgerflow import limits
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.repair import RepairKind
from ledgerflow.operators.attention import ATTENTION_LIMIT_DEFAULT, AttentionItem, attention
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.reconcile import reconcile
from ledgerflow.operators.repairs import RepairRequest, RepairResult, Repairs
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.runtime.detection import ScanReport, bounds_from_environment, scan
from ledgerflow.runtime.engine import Delivered, DeliveryOutcome, InstanceDetail, SyncEngine
from ledgerflow.runtime.store_thread import AsyncStore
from ledgerflow.storage import open_store
from ledgerflow.storage.attention import AttentionFlag
from ledgerflow.storage.audit import AuditRecord
from ledgerflow.storage.migrations import MigrationStatus
from ledgerflow.storage.reconciliation import ReconciliationRun
from ledgerflow.storage.records import InstanceRecord
from ledgerflow.storage.store import Store
from ledgerflow.storage.url import migration_status

__all__ = [
    "AttentionFlag",
    "AttentionItem",
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


class Operations:
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
        self._store = open_store(store, migrate=migrate) if isinstance(store, str) else store
        # Reading, cancelling and signalling need no workflow code: an empty registry pins
        # nothing and starts nothing.
        self._engine = SyncEngine(self._store, Registry(), codec=codec)
        self._authority = authority
        self._clock = clock
        self._codec = codec

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    @property
    def authority(self) -> Authority:
        if self._authority is None:
            self._authority = Authority.from_environment()
        return self._authority

    # -- instances -----------------------------------------------------------------------------

    def detail(self, instance_id: str) -> InstanceDetail:
        """An instance with its step and effect ledgers, timeline and inbox."""
        return self._engine.detail(instance_id)

    def show(self, instance_id: str) -> InstanceReport:
        """An instance's ledgers with its repairs' audit records and its open flags."""
        detail = self._engine.detail(instance_id)
        found = detail.instance.instance_id
        return InstanceReport(
            detail=detail,
            audit=self._store.audit_records(instance_id=found, limit=SHOW_AUDIT_MAX),
            flags=self._store.open_flags(found),
        )

    def find(self, *, tenant: TenantId, workflow: str, key: BusinessKey) -> InstanceRecord | None:
        """The instance a business key started, if any."""
        return self._store.find_instance(tenant=tenant, workflow_name=workflow, business_key=key)

    def wait(self, instance_id: str, *, timeout: float) -> InstanceRecord:
        """The instance once it has ended, or :class:`ResultTimeoutError` after ``timeout``."""
        return self._engine.wait(instance_id, timeout=timeout)

    def result(self, instance_id: str, *, timeout: float = 0.0) -> Any:
        """The workflow's result, or :class:`WorkflowError` saying how it ended otherwise."""
        return self._engine.result(instance_id, timeout=timeout)

    def cancel(self, instance_id: str, *, reason: str, compensate: bool = True) -> InstanceRecord:
        """Ask for the instance to be cancelled (durable; the first request wins)."""
        return self._engine.cancel(instance_id, reason=reason, compensate=compensate)

    def signal(
        self,
        instance_id: str,
        name: str,
        *,
        event_id: str,
        payload: Any = None,
        sender: str | None = None,
        for_step: int | None = None,
        run: int | None = None,
    ) -> Delivered:
        """Deliver a signal, callback or approval; safe to repeat with the same ``event_id``."""
        return self._engine.signal(
            instance_id,
            name,
            event_id=event_id,
            payload=payload,
            sender=sender,
            for_step=for_step,
            run=run,
        )

    def complete_effect(
        self,
        idempotency_key: str,
        *,
        applied: bool,
        evidence: Any = None,
        reason: str | None = None,
        event_id: str | None = None,
    ) -> Delivered:
        """A participant's callback for an asynchronous effect, by its idempotency key."""
        return self._engine.complete_effect(
            idempotency_key, applied=applied, evidence=evidence, reason=reason, event_id=event_id
        )

    # -- what needs a person ---------------------------------------------------------------------

    def attention(
        self,
        *,
        tenant: str | None = None,
        workflow: str | None = None,
        reason: str | None = None,
        limit: int = ATTENTION_LIMIT_DEFAULT,
    ) -> list[AttentionItem]:
        """Parked instances and open flags, oldest first."""
        return attention(self._store, tenant=tenant, workflow=workflow, reason=reason, limit=limit)

    def scan(self, *, detected_by: str, bounds: DetectionBounds | None = None) -> ScanReport:
        """Run the stuck-work scan now, as workers do periodically (default bounds:
        ``LEDGERFLOW_DETECTION``)."""
        bounds = bounds or bounds_from_environment()
        return scan(self._store, bounds, now=self._clock.now(), detected_by=detected_by)

    # -- repairs and their audit -------------------------------------------------------------

    def plan(self, request: RepairRequest) -> RepairResult:
        """The repair's dry run: authority and state are checked, nothing is written."""
        return self.repairs().plan(request)

    def apply(self, request: RepairRequest) -> RepairResult:
        """Apply the repair in one transaction with its audit record (or refuse, on record)."""
        return self.repairs().apply(request)

    def audit(
        self,
        *,
        instance_id: str | None = None,
        actor: str | None = None,
        kind: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """The newest ``limit`` audit records matching every filter given, oldest first."""
        return self._store.audit_records(
            instance_id=InstanceId(instance_id) if instance_id else None,
            actor=actor,
            kind=kind,
            since=since,
            limit=limit,
        )

    def repairs(self) -> Repairs:
        """The audited repair tool on this store, under this service's authority."""
        return Repairs(self._store, self.authority, clock=self._clock, codec=self._codec)

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
        thread = AsyncStore(self._store)
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
        return self._store.reconciliations(limit=limit)

    # Last in the class: below it, ``list`` in an annotation would name this method.
    def list(
        self,
        *,
        status: InstanceStatus | None = None,
        workflow: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        """Instances, newest first."""
        return self._engine.list(status=status, workflow=workflow, tenant=tenant, limit=limit)
