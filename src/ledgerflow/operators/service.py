"""The operators' service: the one front door the faces call (internal).

The ``ledgerflow`` command calls it now, the HTTP endpoint and a console too: reading instances
and their ledgers, cancelling and signalling them, the attention queue and the stuck-work scan,
audited repairs (plan and apply), the audit log, and reconciliation with its runs. Whoever asks,
the same rules answer in the same words, because the service decides nothing itself: each call
is the engine's (:class:`~ledgerflow.runtime.sync_engine.SyncEngine`) or one operator tool's
(:mod:`~ledgerflow.operators.attention`, :mod:`~ledgerflow.operators.repairs`,
:mod:`~ledgerflow.operators.reconcile`). A face imports its answers' types from here, never
from storage.

:class:`Operations` is for synchronous code; :class:`~ledgerflow.operators.async_service.
AsyncOperations` is the same for asyncio, on an engine's store.

The HTTP API and the console call it through :meth:`Operations.acting_as`, which scopes every
call to one authenticated principal (:class:`~ledgerflow.operators.scoped.ScopedOperations`):
its tenant, its role, its name on the audit record. Tokens and console sessions are
:meth:`Operations.tokens`, stored idempotent answers :meth:`Operations.answers`.

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
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Self, Unpack

from ledgerflow import limits
from ledgerflow.ledger.access import ApiToken, InstanceQuery, VersionCount
from ledgerflow.ledger.attention import AttentionFlag, AttentionQuery
from ledgerflow.ledger.audit import AuditQuery, AuditRecord
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import Delivery, InstanceRecord
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.authority import ALL_TENANTS, ApiRole, Principal
from ledgerflow.model.codec import JSON, Codec
from ledgerflow.model.definition import Registry
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.model.ids import BusinessKey, TenantId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.repair import RepairKind
from ledgerflow.operators.access import SignedIn, Tokens
from ledgerflow.operators.actions import ACTION_KINDS
from ledgerflow.operators.attention import AttentionItem, attention
from ledgerflow.operators.authority import Authority, local_principal
from ledgerflow.operators.commands import (
    CancelRequest,
    CompleteEffectRequest,
    LocalCaller,
    MigrateRequest,
    RetireRequest,
    SignalRequest,
    StartExtras,
    StartRequest,
    Writer,
)
from ledgerflow.operators.flow import FlowCommands
from ledgerflow.operators.idempotency import IdempotentAnswers, Replay, request_hash
from ledgerflow.operators.locks import lock_json
from ledgerflow.operators.paging import InstanceOverview, InstancePage, page_instances
from ledgerflow.operators.readiness import Readiness, migrate_journal
from ledgerflow.operators.reconcile import reconcile
from ledgerflow.operators.repairs import RepairRequest, RepairResult, Repairs
from ledgerflow.operators.reports import InstanceReport, instance_report
from ledgerflow.operators.schedules import ScheduleCommands
from ledgerflow.operators.scoped import ScopedOperations
from ledgerflow.operators.upgrades import (
    MigrationPlan,
    MoveOutcome,
    MoveReport,
    UpgradeRequest,
    Upgrades,
)
from ledgerflow.operators.versions import (
    Retirement,
    VersionSummary,
    parse_target,
    version_summaries,
)
from ledgerflow.operators.workers import live_workers, worker_json
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.runtime.detection import ScanReport, bounds_from_environment, scan
from ledgerflow.runtime.engine import (
    Delivered,
    DeliveryOutcome,
    InstanceDetail,
    Started,
)
from ledgerflow.runtime.metrics import Metrics
from ledgerflow.runtime.replay import ReplayVerdict
from ledgerflow.runtime.store_thread import AsyncStore
from ledgerflow.runtime.sync_engine import SyncEngine
from ledgerflow.storage import open_store
from ledgerflow.storage.migrations import MigrationStatus
from ledgerflow.storage.store import Store
from ledgerflow.storage.url import migration_status

__all__ = [
    "ACTION_KINDS",
    "ALL_TENANTS",
    "ApiRole",
    "ApiToken",
    "AttentionFlag",
    "AttentionItem",
    "AttentionQuery",
    "AuditQuery",
    "AuditRecord",
    "Delivered",
    "Delivery",
    "DeliveryOutcome",
    "IdempotentAnswers",
    "InstanceDetail",
    "InstanceOverview",
    "InstancePage",
    "InstanceQuery",
    "InstanceRecord",
    "InstanceReport",
    "MigrationPlan",
    "MigrationStatus",
    "MoveOutcome",
    "MoveReport",
    "Operations",
    "Principal",
    "ReconciliationRun",
    "RepairKind",
    "RepairRequest",
    "RepairResult",
    "Replay",
    "ReplayVerdict",
    "Retirement",
    "ScanReport",
    "ScopedOperations",
    "SignedIn",
    "Started",
    "Tokens",
    "VersionCount",
    "VersionSummary",
    "WorkerRecord",
    "local_actor",
    "migrate_journal",
    "migration_status",
    "parse_target",
    "request_hash",
    "worker_json",
]


def local_actor() -> str:
    """Who acts at the command line without a token: ``local:`` and the account the command
    runs under (:func:`~ledgerflow.operators.authority.local_principal`)."""
    return local_principal()


class Operations:
    """What an operator may do to one store, for synchronous code (the CLI, web handlers).

    ``authority`` decides who may repair or cancel (default: ``LEDGERFLOW_AUTHORITY``, read
    when first needed, so that reading never depends on it). ``registry`` carries the workflow
    definitions :meth:`start` may start (reading and repairing need none). ``migrate`` says
    how a store named by its URL is opened: ``False`` as it is (every operator command),
    ``None`` as the URL says (a server's own journal, created and migrated unless
    ``?migrate=false``).
    """

    def __init__(
        self,
        store: Store | str,
        *,
        authority: Authority | None = None,
        registry: Registry | None = None,
        migrate: bool | None = False,
        clock: Clock = SYSTEM_CLOCK,
        codec: Codec = JSON,
        metrics: Metrics | None = None,
        no_worker_hint: str | None = None,
    ) -> None:
        self._store = open_store(store, migrate=migrate) if isinstance(store, str) else store
        # What this service's engine counts (starts, deliveries), and the journal's gauges it
        # reads for a scrape; None: nothing is counted.
        self.metrics = metrics
        # Reading, cancelling, signalling need no workflow code: an empty registry starts none.
        # ``no_worker_hint``: how a face tells its user to run a worker when a wait times out
        # with none running (default: the SyncEngine's words, for Python code).
        hint = {} if no_worker_hint is None else {"no_worker_hint": no_worker_hint}
        self._engine = SyncEngine(
            self._store, registry or Registry(), codec=codec, metrics=metrics, **hint
        )
        self._authority = authority
        self._clock = clock
        self._codec = codec
        self._readiness = Readiness(self._store, clock)

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

    def page(self, query: InstanceQuery, *, cursor: str | None = None) -> InstancePage:
        """Instances matching ``query``, newest first, a page at a time (``cursor``: the
        previous page's ``next_cursor``)."""
        return page_instances(self._store, query, cursor=cursor)

    def detail(self, instance_id: str) -> InstanceDetail:
        """An instance with its step and effect ledgers, timeline and inbox."""
        return self._engine.detail(instance_id)

    def show(self, instance_id: str) -> InstanceReport:
        """An instance's ledgers with its repairs' audit records and its open flags."""
        return instance_report(self._store, self._engine.detail(instance_id))

    def find(self, *, tenant: TenantId, workflow: str, key: BusinessKey) -> InstanceRecord | None:
        """The instance a business key started, if any."""
        return self._store.find_instance(tenant=tenant, workflow_name=workflow, business_key=key)

    def start(
        self,
        workflow: str,
        *,
        key: str,
        input: Any = None,
        version: int | None = None,
        tenant: str | None = None,
        actor: str | None = None,
        **options: Unpack[StartExtras],
    ) -> Started:
        """Start (or find) the instance of a business key, pinned to a definition of this
        service's registry; recorded against ``actor`` (default: :func:`local_actor`). The
        start options (``start_at``, ``start_in``, ``if_running``, ``if_ended``, ``signal``
        with ``signal_event_id`` and ``signal_payload``, ``debounce_seconds`` with
        ``debounce_max_seconds``): see :class:`StartRequest`."""
        request = StartRequest(workflow, key, input, version, tenant, **options)
        return self._writer(actor).start(request)

    def wait(self, instance_id: str, *, timeout: float) -> InstanceRecord:
        """The instance once it has ended, or :class:`ResultTimeoutError` after ``timeout``."""
        return self._engine.wait(instance_id, timeout=timeout)

    def result(self, instance_id: str, *, timeout: float = 0.0) -> Any:
        """The workflow's result, or :class:`WorkflowError` saying how it ended otherwise."""
        return self._engine.result(instance_id, timeout=timeout)

    def cancel(
        self,
        instance_id: str,
        *,
        reason: str,
        actor: str | None = None,
        compensate: bool = True,
    ) -> InstanceRecord:
        """Ask for the instance to be cancelled (durable; the first request wins), as ``actor``
        (default: :func:`local_actor`), who must hold a role that allows ``cancel`` (the
        repairs' authority); audited."""
        request = CancelRequest(instance_id, reason, compensate)
        return self._writer(actor).cancel(request)

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
        actor: str | None = None,
    ) -> Delivered:
        """Deliver a signal, callback or approval; safe to repeat with the same ``event_id``.
        Recorded in the audit log against ``actor`` (default: :func:`local_actor`), a name
        reserved for completions refused on the record too."""
        request = SignalRequest(instance_id, name, event_id, payload, sender, for_step, run)
        return self._writer(actor).signal(request)

    def complete_effect(
        self,
        idempotency_key: str,
        *,
        applied: bool,
        evidence: Any = None,
        reason: str | None = None,
        event_id: str | None = None,
        actor: str | None = None,
    ) -> Delivered:
        """A participant's callback for an asynchronous effect, by its idempotency key;
        recorded in the audit log against ``actor`` (default: :func:`local_actor`), in the
        callback's transaction."""
        request = CompleteEffectRequest(idempotency_key, applied, evidence, reason, event_id)
        return self._writer(actor).complete_effect(request)

    def schedules(self, actor: str | None = None) -> ScheduleCommands:
        """The journal's schedules, changed as ``actor`` (default: :func:`local_actor`) asks:
        pause, resume, trigger, backfill, delete, each audited (trigger and backfill start
        workflows of this service's registry)."""
        caller = LocalCaller(actor or local_actor(), self._engine, lambda: self.authority)
        return ScheduleCommands(self._store, self._engine, self._clock, caller)

    def flow(self, actor: str | None = None) -> FlowCommands:
        """Flow control on effects: the limits, the THROTTLED attempts, and setting or
        removing a limit as ``actor`` (default: :func:`local_actor`) asks, each audited."""
        caller = LocalCaller(actor or local_actor(), self._engine, lambda: self.authority)
        return FlowCommands(self._store, self._clock, caller)

    def _writer(self, actor: str | None) -> Writer:
        """The changes from outside as ``actor`` (default: :func:`local_actor`) asks them."""
        caller = LocalCaller(actor or local_actor(), self._engine, lambda: self.authority)
        return Writer(self._store, self._engine, self._clock, caller)

    # -- the perimeter: principals, tokens, sessions, idempotent answers -----------------------

    def acting_as(
        self, principal: Principal, *, floor: ApiRole = ApiRole.VIEWER
    ) -> ScopedOperations:
        """This service as ``principal`` may use it: its tenant, its role, its name on the
        audit record (what the HTTP API and the console call); every call needs ``floor`` at
        least (an API route's declared role)."""
        return ScopedOperations(
            store=self._store,
            engine=self._engine,
            clock=self._clock,
            principal=principal,
            floor=floor,
        )

    def tokens(self) -> Tokens:
        """API tokens and console sessions on this journal."""
        return Tokens(self._store, clock=self._clock)

    def transaction(self) -> AbstractContextManager[None]:
        """One transaction of this service's journal that the calls made inside it, on this
        thread, join: an idempotent POST's claim, its change (with the change's audit record)
        and its answer commit together or not at all."""
        return self._store.transaction()

    def answers(self) -> IdempotentAnswers:
        """The stored answers of idempotent POSTs."""
        return IdempotentAnswers(self._store, clock=self._clock)

    def ready(self) -> None:
        """Prove the journal can be read and written now (a readiness probe): a row is
        written and removed again, at most once per ``limits.READY_PROBE_SECONDS``; calls in
        between get that probe's verdict. Any storage error is raised as it is."""
        self._readiness.check()

    def refresh_signals(self) -> None:
        """Read the journal's gauges into this service's metrics, unless they were read
        less than their interval ago (a scrape calls this; many scrapes read once)."""
        if self.metrics is not None and self.metrics.signals_due():
            self.metrics.signals(self._store.consistency_signals(), now=self._clock.now())

    # -- what needs a person ---------------------------------------------------------------------

    def attention(self, query: AttentionQuery | None = None) -> list[AttentionItem]:
        """Parked instances and open flags, oldest first (no query: the whole queue)."""
        return attention(self._store, query)

    def scan(self, *, detected_by: str, bounds: DetectionBounds | None = None) -> ScanReport:
        """Run the stuck-work scan now, as workers do periodically (default bounds:
        ``LEDGERFLOW_DETECTION``)."""
        bounds = bounds or bounds_from_environment()
        return scan(self._store, bounds, now=self._clock.now(), detected_by=detected_by)

    def workers(self, *, bounds: DetectionBounds | None = None) -> list[WorkerRecord]:
        """The live workers (heartbeat within ``bounds.worker_silent_seconds``; default
        ``LEDGERFLOW_DETECTION``), oldest first, with what each serves."""
        bounds = bounds or bounds_from_environment()
        return live_workers(self._store, now=self._clock.now(), bounds=bounds)

    def locks(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """The held durable locks (of one tenant, or of all): holder (parked or not), since
        when, and each lock's queue in order."""
        now = self._clock.now()
        found = self._store.locks(tenant=TenantId(tenant) if tenant is not None else None)
        return [lock_json(lock, now=now) for lock in found]

    # -- repairs and their audit -------------------------------------------------------------

    def plan(self, request: RepairRequest) -> RepairResult:
        """The repair's dry run: authority and state are checked, nothing is written."""
        return self.repairs().plan(request)

    def apply(self, request: RepairRequest) -> RepairResult:
        """Apply the repair in one transaction with its audit record (or refuse, on record)."""
        return self.repairs().apply(request)

    def audit(self, query: AuditQuery | None = None) -> list[AuditRecord]:
        """The audit records a query selects, oldest first (no query: the newest of all)."""
        return self._store.audit_records(query)

    def repairs(self) -> Repairs:
        """The audited repair tool on this store, under this service's authority."""
        return Repairs(
            self._store, self.authority, clock=self._clock, codec=self._codec, metrics=self.metrics
        )

    # -- definition versions ------------------------------------------------------------------

    def versions(self, *, tenant: str | None = None) -> list[VersionSummary]:
        """Per workflow, version and fingerprint: instances by status, the oldest in flight,
        whether it is retired (of one tenant, or of all)."""
        live = live_workers(self._store, now=self._clock.now(), bounds=bounds_from_environment())
        return version_summaries(self._store, tenant=tenant, live=live)

    def retire(
        self, workflow: str, version: int, *, reason: str, actor: str | None = None
    ) -> Retirement:
        """Retire a workflow version with its evidence on the audit record, as ``actor``
        (default: :func:`local_actor`), who must hold a role that allows ``retire-version``
        (the repairs' authority); refused (on the record) while instances in flight are
        pinned to it."""
        request = RetireRequest(workflow, version, reason)
        return self._writer(actor).retire(request)

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

    # -- replay checks and moves to other code -------------------------------------------------

    def upgrades(self, registry: Registry) -> Upgrades:
        """Replay checks, history export, upgrades and migrations against ``registry``'s code."""
        return Upgrades(self._store, registry, clock=self._clock, codec=self._codec)

    def replay(
        self,
        registry: Registry,
        *,
        workflow: str | None = None,
        version: int | None = None,
        limit: int = limits.REPLAY_LIMIT_DEFAULT,
    ) -> list[ReplayVerdict]:
        """Replay in-flight and recently ended histories against ``registry``'s code as it is
        now; nothing is dispatched or written."""
        return self.upgrades(registry).replay_stored(
            workflow=workflow, version=version, limit=limit
        )

    def export(self, instance_id: str) -> dict[str, Any]:
        """One instance's history as a versioned JSON document (``ledgerflow export``)."""
        return self.upgrades(Registry()).export(instance_id)

    def upgrade(
        self,
        registry: Registry,
        *,
        workflow: str,
        version: int,
        to_fingerprint: str,
        actor: str,
        dry_run: bool = False,
    ) -> MoveReport:
        """Move W@N's in-flight instances to ``registry``'s code for W@N (``to_fingerprint``),
        each only if its replay against that code is clean; as ``actor``, who must hold a role
        that allows ``upgrade`` (the repairs' authority); audited. A dry run only replays, as
        ``ledgerflow replay`` does: it writes nothing and needs no role."""
        request = UpgradeRequest(workflow, version, to_fingerprint, dry_run)
        return self._writer(actor).upgrade(self.upgrades(registry), request)

    def migrate_instances(
        self, registry: Registry, plan: MigrationPlan, *, actor: str, dry_run: bool = False
    ) -> MoveReport:
        """Move in-flight instances to another version under a declared plan of positions, as
        ``actor``, who must hold a role that allows ``migrate`` (a dry run too); audited."""
        request = MigrateRequest(plan, dry_run)
        return self._writer(actor).migrate(self.upgrades(registry), request)

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
