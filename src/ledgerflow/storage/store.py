"""The storage seam: what the engine needs from any database, split by who needs it (internal).

Every backend implements :class:`Store` and passes the same contract suite
(``tests/storage``). Methods are synchronous: the runtime calls them from one dedicated thread
per store, which keeps driver objects off the event loop and gives a natural place to group
the commits of many instances into one durable write.

Each part of the engine is typed against the part of the seam it uses, so that mypy refuses
what it has no business calling:

- :class:`JournalStore`, the runtime's: start, claim, renew, commit (fenced), deliver, cancel
  requests, concurrency limits, and the reads of instances, journals, timelines and inboxes
  (:class:`LedgerReads`);
- :class:`DetectionStore`, the stuck-work scan's: the reads, flags, and the candidates each
  rule judges;
- :class:`OperatorStore`, the operators': the reads and flags above, the attention queue,
  audited repairs and reconciliation.

:class:`Store` is all three, what :func:`~ledgerflow.storage.open_store` returns.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from ledgerflow.ledger.access import (
    ApiToken,
    ConsoleSession,
    IdempotencyRecord,
    InstanceQuery,
    VersionCount,
)
from ledgerflow.ledger.attention import (
    AttentionFlag,
    AttentionQuery,
    EffectToSettle,
    FlaggedInstance,
    ParkedInstance,
)
from ledgerflow.ledger.audit import Adoption, AuditEntry, AuditQuery, AuditRecord, RepairWrite
from ledgerflow.ledger.inbox import InboxEntry, InboxRefusals
from ledgerflow.ledger.locks import LockRecord
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import (
    Commit,
    ConsistencySignals,
    Delivery,
    EffectRecord,
    InstanceRecord,
    Journal,
    NewInstance,
    RunRecord,
    StartClaim,
    StartedCount,
    TimelineEntry,
)
from ledgerflow.ledger.transaction import (
    Answer,
    CancelAsked,
    Deliver,
    Delivered,
    RequestCancel,
    Transaction,
)
from ledgerflow.ledger.values import Published
from ledgerflow.ledger.versions import InFlight, RetiredVersion, RetirementEvidence
from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.detection import (
    DueInstance,
    HeldArrival,
    QuietInstance,
    SilentEffect,
    UnservedCount,
    UnservedInstance,
)
from ledgerflow.model.flow import Admission, AdmissionState, FlowAsk, FlowLimit
from ledgerflow.model.ids import EffectId, Generation, InstanceId, RunNumber, TenantId, WorkerId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.routing import Served
from ledgerflow.storage.store_schedules import ScheduleReads, ScheduleTicks


class LedgerReads(ScheduleReads, Protocol):
    """Which store this is, and what anyone may read of the ledgers."""

    url: str
    # True when leases are measured by the database's clock: the runtime then passes now=None
    # to claim and renew, and the database decides (a test may still pass an explicit now).
    database_clock: bool
    # True when a call never waits on a network, only on a local file (SQLite): a caller with
    # nothing else to do may then make it on its own thread rather than hand it over.
    embedded: bool

    def close(self) -> None: ...

    def get_instance(self, instance_id: InstanceId) -> InstanceRecord | None: ...

    def get_instances(self, instance_ids: Sequence[InstanceId]) -> dict[InstanceId, InstanceRecord]:
        """Many instances in one read; unknown ones are absent from the answer."""
        ...

    def find_instance(
        self, *, tenant: TenantId, workflow_name: str, business_key: str
    ) -> InstanceRecord | None: ...

    def list_instances(
        self,
        *,
        status: InstanceStatus | None = None,
        workflow_name: str | None = None,
        tenant: TenantId | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]: ...

    def children(self, instance_id: InstanceId, *, limit: int = 100) -> list[InstanceRecord]:
        """The child workflows an instance started, oldest first, at most ``limit``."""
        ...

    def journal(self, instance_id: InstanceId, run: RunNumber) -> Journal: ...

    def journals(
        self, wanted: Sequence[tuple[InstanceId, RunNumber]]
    ) -> dict[tuple[InstanceId, RunNumber], Journal]:
        """The journals of many instances' runs in one read, keyed as asked."""
        ...

    def effects(self, instance_id: InstanceId) -> list[EffectRecord]: ...

    def runs(self, instance_id: InstanceId, *, latest: int | None = None) -> list[RunRecord]:
        """The instance's closed runs (the ``latest`` ones when given), oldest first; the open
        one is the instance's run."""
        ...

    def locks(self, *, tenant: TenantId | None = None) -> list[LockRecord]:
        """Every held durable lock (of ``tenant``, when given) with its holder, the holder's
        status and the lock's queue in order (``ctx.lock``)."""
        ...

    def published(self, instance_id: InstanceId, name: str) -> Published | None:
        """The value the instance last published under ``name`` (``ctx.publish``); None when
        it published none."""
        ...

    def published_values(self, instance_id: InstanceId) -> list[Published]:
        """Every value the instance published, by name."""
        ...

    def find_effect(self, idempotency_key: str) -> EffectRecord | None: ...

    # Every effect limit (flow control, :mod:`ledgerflow.model.flow`).
    def effect_limits(self) -> list[FlowLimit]: ...

    def flow_admissions(
        self, *, scope: str | None = None, state: AdmissionState | None = None, limit: int = ...
    ) -> list[Admission]:
        """Every kept admission of a limited effect's attempt: THROTTLED, ADMITTED, SETTLED."""
        ...

    def flow_admission(self, effect_id: str, attempt: int) -> Admission | None: ...

    def timeline(self, instance_id: InstanceId) -> list[TimelineEntry]:
        """The instance's timeline: every change of state, oldest first."""
        ...

    def delivery(self, instance_id: InstanceId, event_id: str) -> Delivery | None:
        """One event as the inbox holds it now (what became of it), by its id."""
        ...

    def inbox(self, instance_id: InstanceId) -> list[Delivery]: ...

    def inbox_page(
        self, instance_id: InstanceId, *, after: tuple[float, str] | None, limit: int
    ) -> list[InboxEntry]:
        """A page of the inbox, oldest first, after ``(received_at, event_id)``, with only the
        payloads small enough to show."""
        ...

    def inbox_refusals(self, instance_id: InstanceId) -> InboxRefusals | None:
        """The events refused because the inbox was full (None: none ever was)."""
        ...

    def timeline_page(
        self, instance_id: InstanceId, *, after: int | None, limit: int
    ) -> list[TimelineEntry]:
        """A page of the timeline, oldest first, after the entry numbered ``after``."""
        ...

    def next_available_at(
        self, serves: Collection[Served] | None = None, adopts: Collection[Served] = ()
    ) -> float | None:
        """When the earliest runnable instance becomes claimable, counting only those pinned to
        one of ``serves`` when given, and those of a workflow and version in ``adopts`` whatever
        their fingerprint (work a worker may adopt); None when nothing is."""
        ...

    def count_by_status(self, *, tenant: str | None = None) -> dict[InstanceStatus, int]:
        """Instances by status, of ``tenant`` or of every tenant (None)."""
        ...

    def consistency_signals(self, *, tenant: str | None = None) -> ConsistencySignals:
        """Parked and flagged instances by reason and the UNKNOWN effects open, in one read
        (the gauges metrics report; with ``tenant``, that tenant's only)."""
        ...

    def started_by_bucket(
        self, *, since: float, until: float, bucket_seconds: float, tenant: str | None = None
    ) -> list[StartedCount]:
        """Instances started in ``[since, until)`` by bucket of ``bucket_seconds`` and their
        status now (at most ``limits.ACTIVITY_BUCKETS_MAX`` buckets; ValueError past it)."""
        ...


class JournalStore(LedgerReads, ScheduleTicks, Protocol):
    """What the runtime needs: the fenced journal, and what callers and participants send in."""

    def start_instance(self, new: NewInstance, *, now: float) -> tuple[InstanceRecord, bool]:
        """Insert the instance unless its business key exists; return it and whether it is new."""
        ...

    def start_instances(
        self, starts: Sequence[tuple[NewInstance, StartClaim | None]], *, now: float
    ) -> list[tuple[InstanceRecord, bool] | Exception]:
        """Many starts in one durable transaction, each as :meth:`start_instance` (its error
        at its position). A new instance with a :class:`StartClaim` is also claimed for that
        owner when a claim would take it now."""
        ...

    def claim(
        self,
        *,
        owner: WorkerId,
        now: float | None,
        lease_seconds: float,
        limit: int,
        lease_expiries_max: int = ...,
        alone: bool = ...,
        running: Collection[InstanceId] = ...,
        serves: Collection[Served] | None = ...,
        retaking: Collection[InstanceId] = ...,
    ) -> list[InstanceRecord]:
        """Take up to ``limit`` due instances that nobody holds, each with a higher generation.

        Routed by capability: only instances pinned to one of ``serves`` (workflow, version,
        fingerprint) are taken; None takes any (a caller that runs no workflow code).

        ``running`` names the instances ``owner`` drives now: never handed to it again, even
        with a lapsed lease (its heartbeat renews them), so one worker never runs two copies.

        An instance whose lease ran out ``lease_expiries_max`` times in a row without a commit
        is parked (``poison_crash_loop``) instead of handed out; one that is a single lapse
        away is taken only ``alone`` (the claimer drives nothing else) and then as the only
        instance of the claim. A row that fails its invariants is skipped, flagged
        (``poison_corrupt_row``) and set aside. ``retaking`` names instances whose lease this
        owner lost to its own store (a stall, an outage): their lapse is not counted.
        """
        ...

    def adoptable(
        self,
        *,
        adopts: Collection[Served],
        live_since: float,
        now: float | None,
        limit: int,
        running: Collection[InstanceId] = ...,
    ) -> list[InstanceRecord]:
        """Due instances of the workflows and versions of ``adopts`` pinned to another
        fingerprint that no worker with a heartbeat since ``live_since`` serves (a worker with
        ``adopts``' code may adopt them, after a clean replay), oldest due first."""
        ...

    def adopt(
        self, adoption: Adoption, *, owner: WorkerId, now: float | None, lease_seconds: float
    ) -> tuple[InstanceRecord, int] | None:
        """Repin, claim and audit an adoption in one transaction, if the instance is still as
        its replay read it; the claimed instance and the audit id, or None."""
        ...

    def register_worker(self, worker: WorkerRecord, *, now: float) -> None:
        """Announce a worker and the definitions it serves (again, if already known)."""
        ...

    def heartbeat_worker(self, worker_id: WorkerId, *, now: float) -> bool:
        """Renew its heartbeat; False when it is not registered (it registers again)."""
        ...

    def stop_worker(self, worker_id: WorkerId, *, now: float) -> None:
        """A clean shutdown: the worker stops being live at once."""
        ...

    def renew(
        self,
        *,
        owner: WorkerId,
        leases: Sequence[tuple[InstanceId, Generation]],
        now: float | None,
        lease_seconds: float,
    ) -> list[InstanceId]:
        """Extend leases; return the instances this owner no longer holds."""
        ...

    def commit(
        self, commits: Sequence[Commit | Transaction], *, now: float
    ) -> list[Exception | None]:
        """Apply many owners' commits (and transactions) in one durable transaction.

        Each is applied all or nothing; one refused (stale generation, unexpected state) is
        rolled back alone and its error returned at its position.
        """
        ...

    def apply(self, transaction: Transaction, *, now: float) -> tuple[Answer, ...]:
        """Apply a transaction of typed writes over any number of instances, all or nothing
        (:mod:`ledgerflow.ledger.transaction`); return the store's answer to each write, in
        order. A refusal of any part raises, and nothing of it is durable."""
        ...

    def request_cancel(self, write: RequestCancel, *, now: float) -> CancelAsked | None:
        """Record a cancel request unless one exists or the instance has ended; the instance
        after it (None if unknown) and whether this call recorded the request."""
        ...

    def cancel_requests(self, *, owner: WorkerId) -> list[InstanceId]:
        """Instances this owner drives that someone asked to cancel."""
        ...

    def deliver(self, write: Deliver, *, now: float) -> Delivered | None:
        """Keep an event (deduplicated by id), rejected with the reason when it comes too late
        (ended instance, closed step, older run) or ``write.refuse`` (refusal, reason) says
        why; wake a waiting instance. None when the instance does not exist. An event past the
        inbox's bounds is not kept but counted: :class:`~ledgerflow.errors.InboxFullError`."""
        ...

    def pending_deliveries(self, instance_id: InstanceId, name: str) -> list[Delivery]: ...

    def set_limit(self, scope: str, in_flight_max: int | None) -> None:
        """At most ``in_flight_max`` owned instances of ``scope`` ('workflow:NAME' or
        'tenant:ID') at once across all workers; None removes the limit."""
        ...

    def limits(self) -> dict[str, int]: ...

    def set_effect_limit(self, limit: FlowLimit | None, *, scope: str | None = None) -> None:
        """Set an effect limit (scope ``effect:PARTICIPANT.OPERATION``), or remove ``scope``'s."""

    def declare_effect_limits(self, limits: list[FlowLimit], *, actor: str) -> list[FlowLimit]: ...

    def admit_effect(self, ask: FlowAsk, *, now: float | None) -> Admission | None:
        """Decide one attempt's dispatch under its limit in one transaction (None: no limit)."""


class DetectionStore(LedgerReads, Protocol):
    """What the stuck-work scan needs: the ledgers' reads, flags, and the candidates of each
    rule (storage/sql_attention.py). A claim raises its own flags inside the claim."""

    def raise_flag(
        self,
        *,
        instance_id: InstanceId,
        reason_code: str,
        evidence: str,
        detected_by: str,
        now: float,
    ) -> bool:
        """Open a flag; False when an open flag of that reason exists for the instance."""
        ...

    def clear_flag(
        self,
        *,
        instance_id: InstanceId,
        reason_code: str,
        cleared_by: str,
        reason: str,
        now: float,
    ) -> bool:
        """Close the open flag of that reason; False when there was none."""
        ...

    def open_flags(self, instance_id: InstanceId | None = None) -> list[AttentionFlag]: ...

    def quiet_instances(self, *, now: float, cutoff: float, limit: int) -> list[QuietInstance]:
        """Owned instances with a live lease but no claim or commit since ``cutoff`` and no
        effect in flight, oldest first, at most ``limit`` (the stuck-step scan)."""
        ...

    def due_instances(self, *, now: float, cutoff: float, limit: int) -> list[DueInstance]:
        """Runnable instances due since ``cutoff`` with no live lease (the unclaimed scan)."""
        ...

    def silent_effects(self, *, now: float, cutoff: float, limit: int) -> list[SilentEffect]:
        """Effects of live instances sent or accepted since ``cutoff`` and not answered (the
        unresponsive-participant scan)."""
        ...

    def held_arrivals(self, *, now: float, cutoff: float, limit: int) -> list[HeldArrival]:
        """Waiting instances not due that hold, since ``cutoff``, an event their open wait
        takes, the callback of an effect they await, or a cancel request at a wait or timer
        (the lost wake-up scan)."""
        ...

    def wake_held(self, instance_id: InstanceId, *, now: float) -> bool:
        """Make a waiting instance due now (a lost wake-up found); False if it is not waiting."""
        ...

    def workers(self, *, live_since: float | None, limit: int = ...) -> list[WorkerRecord]:
        """Workers not stopped with a heartbeat since ``live_since`` (every one when None)."""
        ...

    def unserved_instances(
        self, *, now: float, cutoff: float, live_since: float, limit: int
    ) -> list[UnservedInstance]:
        """Runnable instances due since ``cutoff`` with no live lease that no worker with a
        heartbeat since ``live_since`` serves."""
        ...

    def unserved_counts(
        self, *, live_since: float, now: float, limit: int = ...
    ) -> list[UnservedCount]:
        """Per definition that no worker with a heartbeat since ``live_since`` serves: its
        instances not ended, and how many are due at ``now``."""
        ...

    def requeue_repaired(self, instance_id: InstanceId, *, cleared_by: str, now: float) -> bool:
        """A row set aside as damaged that reads cleanly again becomes due; its flag clears."""
        ...


class OperatorStore(DetectionStore, Protocol):
    """What the operators need: the ledgers and flags (the scan's part), the attention queue,
    audited repairs and reconciliation."""

    def transaction(self) -> AbstractContextManager[None]:
        """A write transaction that every call on this store made inside it, on this thread,
        joins: they commit together or not at all (each call still all or nothing on its own).
        A change from outside commits with its audit record and its idempotent answer this way."""
        ...

    def flags(self, instance_id: InstanceId) -> list[AttentionFlag]:
        """Every flag of one instance, open and cleared, oldest first."""
        ...

    def attention_rows(
        self, query: AttentionQuery
    ) -> tuple[list[ParkedInstance], list[FlaggedInstance]]:
        """Parked instances and open flags, each oldest first, at most ``query.limit`` of each."""
        ...

    def attention_effects(self, instance_id: InstanceId) -> list[EffectToSettle]:
        """Effects in doubt (UNKNOWN) and failed compensations of one instance."""
        ...

    # -- audited repairs (storage/sql_audit.py) -----------------------------------------------

    def apply_repair(self, repair: RepairWrite, *, now: float, lease_now: float | None) -> int:
        """Apply one repair with its audit record in one transaction, if the state it was
        planned against still holds and no live lease is held; return the audit id."""
        ...

    def append_audit(self, entry: AuditEntry, *, now: float) -> int:
        """Append an audit record: on its own (a refused or repeated repair), or, inside
        ``transaction()``, with the change it records."""
        ...

    def audit_records(self, query: AuditQuery | None = None) -> list[AuditRecord]:
        """The newest ``query.limit`` audit records matching every filter it gives, oldest
        first (no query: the newest of all)."""
        ...

    def last_applied_repair(self, fingerprint: str) -> AuditRecord | None: ...

    # -- reconciliation (storage/sql_reconcile.py) --------------------------------------------

    def reconcile_candidates(
        self, *, participants: Sequence[str], limit: int
    ) -> list[EffectRecord]:
        """Up to ``limit`` effects of these participants to compare with their facts, least
        recently compared first: CONFIRMED, FAILED, and UNKNOWN ones of parked instances."""
        ...

    def begin_reconciliation(self, *, actor: str, now: float) -> int:
        """Record that a run started; return its id."""
        ...

    def finish_reconciliation(
        self, run: ReconciliationRun, *, compared_ids: Sequence[EffectId], now: float
    ) -> None:
        """Record a run's outcome and stamp the effects it compared, in one transaction."""
        ...

    def reconciliations(self, *, limit: int = 20) -> list[ReconciliationRun]:
        """The newest ``limit`` runs, newest first."""
        ...

    # -- the operators' listings (storage/sql_reads.py) ---------------------------------------

    def page_instances(self, query: InstanceQuery) -> list[InstanceRecord]:
        """One page of a filtered listing, newest first, after ``query.after``."""
        ...

    def version_counts(self, *, tenant: str | None) -> list[VersionCount]:
        """Instances per workflow, version, fingerprint and status (one tenant's, or all)."""
        ...

    # -- definition versions (storage/sql_versions.py) ---------------------------------------

    def oldest_in_flight(self, *, tenant: str | None) -> list[InFlight]:
        """Per workflow, version and fingerprint: its oldest instance not ended for good."""
        ...

    def retired_versions(self) -> list[RetiredVersion]: ...

    def retirement_evidence(self, workflow_name: str, workflow_version: int) -> RetirementEvidence:
        """What the journal holds of a version, read with no start or status change of any
        instance able to slip in until the transaction ends (call it in ``transaction()``,
        beside :meth:`retire_version`)."""
        ...

    def retire_version(
        self,
        workflow_name: str,
        workflow_version: int,
        *,
        retired_by: str,
        reason: str,
        audit_id: int,
        now: float,
    ) -> None:
        """Retire a version, on the record of its audit entry ``audit_id``."""
        ...

    # -- the perimeter (storage/sql_access.py) ------------------------------------------------

    def insert_token(self, token: ApiToken) -> ApiToken | None:
        """Insert a token unless a live token holds its name (that one is returned then)."""
        ...

    def get_token(self, token_id: str) -> ApiToken | None: ...

    def tokens(self) -> list[ApiToken]: ...

    def revoke_token(self, token_id: str, *, revoked_by: str, now: float) -> bool:
        """Revoke a live token and end its console sessions; False when none was live."""
        ...

    def insert_session(self, session: ConsoleSession) -> None: ...

    def get_session(self, session_hash: str, *, now: float) -> ConsoleSession | None: ...

    def delete_session(self, session_hash: str) -> None: ...

    def reserve_idempotency(
        self,
        *,
        scope: str,
        key: str,
        request_hash: str,
        now: float,
        cutoff: float,
        abandoned_before: float,
    ) -> IdempotencyRecord | None:
        """Claim ``key`` at ``now`` (None), or the record that already holds it; records older
        than ``cutoff`` are swept first; an unanswered claim of the same request made before
        ``abandoned_before`` is taken over (None)."""
        ...

    def finish_idempotency(
        self, *, scope: str, key: str, claimed_at: float, status: int, body: str
    ) -> bool: ...

    def release_idempotency(self, *, scope: str, key: str, claimed_at: float) -> None: ...


class Store(JournalStore, OperatorStore, Protocol):
    """A whole store, as a backend implements it: every part of the seam."""
