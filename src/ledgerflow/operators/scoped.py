"""The operators' service as one principal sees it: its tenant, its role, its name on the
record (internal).

The HTTP API and the console never call the service unscoped: each request is answered by
``Operations.acting_as(principal)``, a :class:`ScopedOperations` that

- shows only the principal's tenant: an instance of another tenant is *not found*
  (:class:`~ledgerflow.errors.InstanceNotFoundError`, the same answer as an unknown id, so ids
  do not leak), and listings, the attention queue, the audit log and the versions are limited
  to it; reconciliation runs, which span tenants, only to a principal that sees them all;
- holds each call to the principal's role (:class:`~ledgerflow.model.authority.ApiRole`): a
  read route checks the role it declares before its handler runs; a route that changes
  something hands its role down as the ``floor`` every call here is held to, so that the
  refusal is decided here, where it is recorded;
- acts under the principal's name: a signal's sender is the principal (a different ``sender``
  is refused, an approval cannot be spoofed), a repair's actor is the principal, and every
  change is on the audit record with it (:mod:`ledgerflow.operators.actions`);
- commits every change with its audit record in one transaction (``store.transaction()``):
  a death between the two leaves neither;
- records every refusal of a change (a role below the call's, another tenant named, another
  sender named, a stale or refused repair) with the principal, before it is raised. A dry run
  writes nothing, its refusal neither; an instance another tenant holds is not found, and a
  request about it is not recorded (that would tell the other tenant's log about it).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Unpack

from ledgerflow import limits
from ledgerflow.errors import (
    InstanceNotFoundError,
    NotAuthorizedError,
    ResultTimeoutError,
)
from ledgerflow.ledger.access import InstanceQuery, VersionCount
from ledgerflow.ledger.attention import AttentionQuery
from ledgerflow.ledger.audit import AuditQuery, AuditRecord
from ledgerflow.ledger.inbox import InboxEntry
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import Delivery, InstanceRecord, TimelineEntry
from ledgerflow.ledger.values import NotPublished, Published
from ledgerflow.model.authority import ALL_TENANTS, ApiRole, Principal
from ledgerflow.model.ids import DEFAULT_TENANT, InstanceId, TenantId
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.operators import disclosure
from ledgerflow.operators.attention import AttentionItem, attention
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.commands import (
    CancelRequest,
    CompleteEffectRequest,
    Operation,
    RetireRequest,
    SignalRequest,
    StartExtras,
    StartRequest,
    UpdateRequest,
    Writer,
)
from ledgerflow.operators.dashboard import Dashboard, dashboard
from ledgerflow.operators.locks import lock_json
from ledgerflow.operators.paging import (
    InstanceOverview,
    InstancePage,
    Page,
    overview,
    page_inbox,
    page_instances,
    page_timeline,
)
from ledgerflow.operators.repairs import RepairRequest, RepairResult, Repairs
from ledgerflow.operators.schedules import ScheduleCommands
from ledgerflow.operators.versions import (
    Retirement,
    VersionSummary,
    version_summaries,
)
from ledgerflow.operators.workers import live_workers, worker_json
from ledgerflow.runtime import values
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.core import ended_error
from ledgerflow.runtime.detection import bounds_from_environment
from ledgerflow.runtime.engine import (
    Delivered,
    Started,
)
from ledgerflow.runtime.sync_engine import SyncEngine
from ledgerflow.runtime.unserved import unserved_explanation
from ledgerflow.storage.store import Store

__all__ = ["ScopedOperations"]


def authority_for(principal: Principal) -> Authority:
    """The repair authority a principal's role grants, as the repairs check it."""
    return Authority.of(Authority.for_principal(principal))


class ScopedOperations:
    """What one principal may do, through the same calls the operators' service makes."""

    def __init__(
        self,
        *,
        store: Store,
        engine: SyncEngine,
        clock: Clock,
        principal: Principal,
        floor: ApiRole = ApiRole.VIEWER,
    ) -> None:
        self._store = store
        self._engine = engine
        self._clock = clock
        self.principal = principal
        # The least role any call here needs (a route's declared role, see the module's text).
        self.floor = floor

    # -- rules ---------------------------------------------------------------------------------

    def require(self, needed: ApiRole) -> None:
        """:class:`NotAuthorizedError` unless the principal's role allows ``needed``'s calls
        (and the floor's)."""
        if self.floor.allows(needed):
            needed = self.floor  # the higher of the two
        if not self.principal.role.allows(needed):
            raise NotAuthorizedError(
                f"{self.principal.name} holds the {self.principal.role.value} role; this needs "
                f"{needed.value} or above",
                actor=self.principal.name,
            )

    def _visible(self, instance_id: str) -> InstanceRecord:
        record = self._store.get_instance(InstanceId(instance_id))
        if record is None or not self.principal.sees(record.tenant):
            raise InstanceNotFoundError(instance_id=instance_id)
        return record

    def _seen(self, record: InstanceRecord) -> InstanceRecord:
        """An instance as this principal is shown it (:mod:`~ledgerflow.operators.disclosure`)."""
        return disclosure.instance_seen(record, self.principal.role)

    # -- reading -------------------------------------------------------------------------------

    def page(self, query: InstanceQuery, *, cursor: str | None = None) -> InstancePage:
        """Instances matching ``query`` in this principal's tenant, newest first, a page at a
        time (``cursor``: where the previous page ended)."""
        self.require(ApiRole.VIEWER)
        scope = self.principal.tenant_filter
        if scope is not None and query.tenant not in (None, scope):
            return InstancePage(items=[], next_cursor=None)
        tenant = scope if scope is not None else query.tenant
        page = page_instances(self._store, replace(query, tenant=tenant), cursor=cursor)
        return replace(page, items=[self._seen(i) for i in page.items])

    def parked_reasons(self) -> list[str]:
        """The reason codes of the principal's parked instances (a listing's filter offers
        them)."""
        self.require(ApiRole.VIEWER)
        signals = self._store.consistency_signals(tenant=self.principal.tenant_filter)
        return sorted(signals.parked_by_reason)

    def get(self, instance_id: str) -> InstanceRecord:
        self.require(ApiRole.VIEWER)
        return self._seen(self._visible(instance_id))

    def overview(
        self,
        instance_id: str,
        *,
        inbox_cursor: str | None = None,
        timeline_cursor: str | None = None,
    ) -> InstanceOverview:
        """An instance's page: its ledgers and a bounded page of its inbox and timeline."""
        record = self.get(instance_id)
        view = overview(
            self._store, record, inbox_cursor=inbox_cursor, timeline_cursor=timeline_cursor
        )
        return disclosure.detail_seen(view, self.principal.role)

    def inbox(self, instance_id: str, *, cursor: str | None, limit: int) -> Page[InboxEntry]:
        """A page of an instance's inbox, oldest first (large payloads shown by size only)."""
        return page_inbox(self._store, self.get(instance_id), cursor=cursor, limit=limit)

    def timeline(self, instance_id: str, *, cursor: str | None, limit: int) -> Page[TimelineEntry]:
        """A page of an instance's timeline, oldest first."""
        return page_timeline(self._store, self.get(instance_id), cursor=cursor, limit=limit)

    def event(self, instance_id: str, event_id: str) -> Delivery:
        """One event of an instance's inbox, whole (its payload however large)."""
        record = self.get(instance_id)
        found = self._store.delivery(record.instance_id, event_id)
        if found is None:
            raise InstanceNotFoundError(
                "the instance has no event of this id",
                instance_id=record.instance_id,
                event_id=event_id,
            )
        return found

    def result(self, instance_id: str) -> InstanceRecord:
        """A SUCCEEDED instance (its result decoded by ``result_value``); otherwise
        :class:`~ledgerflow.errors.WorkflowError` saying how it ended or where it stopped, or
        :class:`~ledgerflow.errors.ResultTimeoutError` while it is still on its way."""
        record = self.get(instance_id)
        if record.status is InstanceStatus.SUCCEEDED:
            return record
        if record.status in TERMINAL_STATUSES:
            raise ended_error(record)
        raise ResultTimeoutError(
            f"the instance is {record.status.value}: it has no result yet",
            instance_id=record.instance_id,
        )

    def flags_and_audit(self, instance_id: str) -> tuple[list[Any], list[AuditRecord]]:
        """An instance's open attention flags and its audit records (oldest first)."""
        self.require(ApiRole.VIEWER)
        record = self._visible(instance_id)
        return (
            self._store.open_flags(record.instance_id),
            self._store.audit_records(
                AuditQuery(instance_id=record.instance_id, limit=limits.PAGE_SIZE_MAX)
            ),
        )

    def find(self, *, tenant: str | None, workflow: str, key: str) -> InstanceRecord:
        """The instance a business key started in a tenant (default: the principal's)."""
        self.require(ApiRole.VIEWER)
        tenant_id = self._tenant(tenant)
        found = self._store.find_instance(
            tenant=TenantId(tenant_id), workflow_name=workflow, business_key=key
        )
        if found is None or not self.principal.sees(found.tenant):
            raise InstanceNotFoundError(
                f"no {workflow!r} instance has business key {key!r} in tenant {tenant_id!r}"
            )
        return self._seen(found)

    def dashboard(self) -> Dashboard:
        """The home page's counts, of the principal's tenant (every tenant for an admin)."""
        self.require(ApiRole.VIEWER)
        return dashboard(self._store, tenant=self.principal.tenant_filter, now=self._clock.now())

    def attention(
        self,
        *,
        workflow: str | None = None,
        reason: str | None = None,
        limit: int = limits.ATTENTION_LIMIT_DEFAULT,
    ) -> list[AttentionItem]:
        self.require(ApiRole.VIEWER)
        items = attention(
            self._store,
            AttentionQuery(
                tenant=self.principal.tenant_filter, workflow=workflow, reason=reason, limit=limit
            ),
        )
        # A flag may name an instance that is gone (no tenant): only a principal that sees
        # every tenant sees those.
        return [
            disclosure.attention_seen(i, self.principal.role)
            for i in items
            if self.principal.sees(i.tenant or ALL_TENANTS)
        ]

    def audit(
        self,
        *,
        instance_id: str | None = None,
        actor: str | None = None,
        kind: str | None = None,
        since: float | None = None,
        before_id: int | None = None,
        limit: int = limits.PAGE_SIZE_DEFAULT,
    ) -> list[AuditRecord]:
        """The newest audit records of the principal's tenant, oldest first."""
        self.require(ApiRole.VIEWER)
        return self._store.audit_records(
            AuditQuery(
                instance_id=InstanceId(instance_id) if instance_id else None,
                actor=actor,
                kind=kind,
                since=since,
                tenant=self.principal.tenant_filter,
                before_id=before_id,
                limit=max(1, min(limit, limits.PAGE_SIZE_MAX)),
            )
        )

    def reconciliations(self, *, limit: int = 20) -> list[ReconciliationRun]:
        """Reconciliation runs compare effects of every tenant: shown only to a principal
        that sees every tenant."""
        self.require(ApiRole.VIEWER)
        if self.principal.tenant != ALL_TENANTS:
            return []
        return self._store.reconciliations(limit=max(1, min(limit, limits.PAGE_SIZE_MAX)))

    def versions(self) -> list[VersionCount]:
        """Instances per workflow, version, fingerprint and status, as the journal holds them."""
        self.require(ApiRole.VIEWER)
        return self._store.version_counts(tenant=self.principal.tenant_filter)

    def version_summaries(self) -> list[VersionSummary]:
        """Per workflow, version and fingerprint: instances by status (of the principal's
        tenant), the oldest in flight, whether it is retired."""
        self.require(ApiRole.VIEWER)
        live = live_workers(self._store, now=self._clock.now(), bounds=bounds_from_environment())
        return version_summaries(self._store, tenant=self.principal.tenant_filter, live=live)

    def retire(self, workflow: str, version: int, *, reason: str) -> Retirement:
        """Retire a workflow version (every tenant's instances count as its evidence): an
        admin's call, and only one that sees every tenant."""
        return self._writer().retire(RetireRequest(workflow, version, reason))

    def unserved(self, instance_id: str) -> str | None:
        """Why the instance does not move although workers run (no live worker serves the
        code it is pinned to: which, what they serve instead, how it moves), or None."""
        record = self.get(instance_id)
        return unserved_explanation(
            self._store, record, bounds=bounds_from_environment(), now=self._clock.now()
        )

    def workers(self) -> list[dict[str, Any]]:
        """The live workers and what they can run (heartbeat, slots, definitions served).
        Workers hold no tenant's data (they serve every tenant), so every viewer sees them."""
        self.require(ApiRole.VIEWER)
        now = self._clock.now()
        found = live_workers(self._store, now=now, bounds=bounds_from_environment())
        return [worker_json(w, now=now) for w in found]

    def locks(self) -> list[dict[str, Any]]:
        """The held durable locks of the principal's tenant (every tenant's for one that sees
        them all), each with its holder and queue."""
        self.require(ApiRole.VIEWER)
        now = self._clock.now()
        scope = self.principal.tenant_filter
        found = self._store.locks(tenant=TenantId(scope) if scope is not None else None)
        return [lock_json(lock, now=now) for lock in found]

    def _tenant(self, tenant: str | None) -> str:
        if tenant is None:
            scope = self.principal.tenant_filter
            return scope if scope is not None else DEFAULT_TENANT
        return tenant

    # -- changing: the one implementation of each (operators/commands.py), as this principal -

    def schedules(self) -> ScheduleCommands:
        """The schedules of this principal's tenant, changed in its name (each audited)."""
        return ScheduleCommands(self._store, self._engine, self._clock, self)

    def _writer(self) -> Writer:
        return Writer(self._store, self._engine, self._clock, self)

    def start(
        self,
        workflow: str,
        *,
        key: str,
        input: Any,
        version: int | None,
        tenant: str | None,
        **options: Unpack[StartExtras],
    ) -> Started:
        """Start (or find) the instance of a business key, in the principal's tenant."""
        request = StartRequest(workflow, key, input, version, tenant, **options)
        return self._writer().start(request)

    def cancel(self, instance_id: str, *, reason: str, compensate: bool) -> InstanceRecord:
        return self._writer().cancel(CancelRequest(instance_id, reason, compensate))

    def signal(
        self,
        instance_id: str,
        name: str,
        *,
        event_id: str,
        payload: Any,
        sender: str | None,
        for_step: int | None,
        run: int | None,
    ) -> Delivered:
        """Deliver an event sent by the principal: ``sender``, when given, must name it."""
        request = SignalRequest(instance_id, name, event_id, payload, sender, for_step, run)
        return self._writer().signal(request)

    def update(
        self, instance_id: str, name: str, *, update_id: str, payload: Any, timeout: float
    ) -> tuple[Delivered, Any]:
        """Store an update request sent by the principal (audited), then wait up to
        ``timeout`` seconds for its reply: (the request as kept, the reply or
        ``values.NO_REPLY_YET``). A validator's refusal, a handler's failure and an instance
        that ended first are :class:`~ledgerflow.errors.UpdateRejectedError`."""
        request = UpdateRequest(instance_id, name, update_id, payload)
        delivered = self._writer().update(request)
        iid = delivered.delivery.instance_id
        deadline = time.monotonic() + min(timeout, limits.UPDATE_WAIT_SECONDS_MAX)
        while True:
            reply = values.reply_of(self._store, iid, update_id)
            if reply is not values.NO_REPLY_YET or time.monotonic() >= deadline:
                return delivered, reply
            time.sleep(limits.VALUE_POLL_SECONDS)

    def read_value(self, instance_id: str, name: str) -> Published | NotPublished:
        """The value an instance of the principal's tenant last published under ``name``."""
        self.require(ApiRole.VIEWER)
        record = self._visible(instance_id)
        found = self._store.published(record.instance_id, name)
        return found or NotPublished(instance_id=record.instance_id, name=name)

    def complete_effect(
        self,
        idempotency_key: str,
        *,
        applied: bool,
        evidence: Any,
        reason: str | None,
        event_id: str | None,
    ) -> Delivered:
        """A participant's callback for an asynchronous effect of the principal's tenant."""
        request = CompleteEffectRequest(idempotency_key, applied, evidence, reason, event_id)
        return self._writer().complete_effect(request)

    # -- the caller the changes are made for (operators.commands.Caller) ----------------------

    @property
    def actor(self) -> str:
        return self.principal.name

    @property
    def role(self) -> str | None:
        return self.principal.role.value

    def authorize(self, operation: Operation) -> str | None:
        self.require(operation.role)
        return self.principal.role.value

    def visible(self, instance_id: str) -> InstanceRecord:
        return self._visible(instance_id)

    def tenant(self, tenant: str | None) -> str:
        return self._tenant(tenant)

    def acts_in(self, tenant: str) -> None:
        if not self.principal.sees(tenant):
            raise NotAuthorizedError(
                f"{self.principal.name} acts only in tenant {self.principal.tenant!r}",
                actor=self.principal.name,
            )

    def spans_tenants(self) -> None:
        if self.principal.tenant != ALL_TENANTS:
            raise NotAuthorizedError(
                f"{self.principal.name} sees one tenant; retiring a version concerns them all",
                actor=self.principal.name,
            )

    def sender(self, sender: str | None) -> str | None:
        if sender is not None and sender != self.principal.name:
            raise NotAuthorizedError(
                f"the sender of an event is the authenticated principal "
                f"({self.principal.name}); a request may not speak for {sender!r}",
                actor=self.principal.name,
            )
        return self.principal.name

    def seen(self, record: InstanceRecord) -> InstanceRecord:
        return self._seen(record)

    # -- repairs -------------------------------------------------------------------------------

    def _repairs(self) -> Repairs:
        return Repairs(
            self._store,
            authority_for(self.principal),
            clock=self._clock,
            metrics=self._engine.metrics,
        )

    def _as_principal(self, request: RepairRequest) -> RepairRequest:
        self._visible(request.instance_id)
        return replace(request, actor=self.principal.name)

    def plan(self, request: RepairRequest) -> RepairResult:
        """The repair's dry run, by the principal: nothing is written (a refusal neither)."""
        request = self._as_principal(request)
        self.require(ApiRole.OPERATOR)
        return self._repairs().plan(request)

    def apply(
        self, request: RepairRequest, *, planned_generation: int | None = None
    ) -> RepairResult:
        """Apply the repair as the principal; with ``planned_generation`` (a plan shown
        earlier), only while the instance is still at that generation (else
        :class:`~ledgerflow.errors.StalePreconditionError`). Every refusal is recorded by the
        repairs tool, in its own shape, with the principal."""
        request = self._as_principal(request)
        repairs = self._repairs()
        try:
            self.require(ApiRole.OPERATOR)
        except NotAuthorizedError as exc:
            repairs.refused(request, exc, role=self.principal.role.value)
            raise
        return repairs.apply(request, planned_generation=planned_generation)
