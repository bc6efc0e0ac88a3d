"""The store logic every SQL backend shares: named queries, row mapping, fenced commits.

A dialect (:mod:`ledgerflow.storage.sqlite`, later PostgreSQL) supplies a connection, how to
open a write transaction and a savepoint, and how to map driver errors; everything else, and
in particular the rule that a fenced write touching zero rows is an error, lives here once.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ledgerflow import limits, mutations
from ledgerflow.errors import (
    ConcurrencyError,
    FencedOutError,
    IllegalTransitionError,
    LedgerflowError,
    StorageCorruptError,
)
from ledgerflow.model import detection
from ledgerflow.model.detection import DEFAULT_BOUNDS
from ledgerflow.model.effect import EFFECT_MACHINE, EffectState
from ledgerflow.model.ids import (
    Generation,
    InstanceId,
    RunNumber,
    TenantId,
    WorkerId,
)
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceStatus
from ledgerflow.model.step import STEP_MACHINE, StepStatus
from ledgerflow.storage.records import (
    Commit,
    EffectRecord,
    EffectWrite,
    EventRecord,
    InstanceRecord,
    InstanceWrite,
    Journal,
    NewInstance,
    Release,
    StartClaim,
    StepWrite,
)
from ledgerflow.storage.rows import (
    Row,
    effect_from_row,
    effect_invariant,
    fields,
    instance_from_row,
    refuse_broken,
    step_from_row,
    step_invariant,
)
from ledgerflow.storage.sql_attention import AttentionStore
from ledgerflow.storage.sql_audit import AuditStore
from ledgerflow.storage.sql_inbox import InboxStore
from ledgerflow.storage.sql_reconcile import ReconcileStore

log = logging.getLogger("ledgerflow.storage")


class _NotNow(Exception):  # noqa: N818 - a signal inside the claim loop, not an error
    """Rolls back the claim of one instance that this claim may not take now."""


class _RefusedError(Exception):
    """A commit of a group was refused: roll the group's transaction back (internal)."""

    def __init__(self, error: LedgerflowError) -> None:
        super().__init__(str(error))
        self.error = error


class SqlStore(InboxStore, AttentionStore, AuditStore, ReconcileStore, abc.ABC):
    """Shared implementation of :class:`~ledgerflow.storage.store.Store` over named SQL."""

    url: str
    # True when leases are measured by the database's clock (claim and renew then take now=None).
    database_clock: bool = False

    def __init__(self, queries: Mapping[str, str]) -> None:
        self._q = queries

    # -- what a dialect provides -------------------------------------------------------------

    @abc.abstractmethod
    def _run(self, name: str, params: Mapping[str, Any]) -> tuple[list[Row], int]:
        """Run a named query; return its rows and the number of rows it changed."""

    @abc.abstractmethod
    def _write_transaction(self) -> contextlib.AbstractContextManager[None]:
        """A durable write transaction that holds the write lock from its first statement."""

    @abc.abstractmethod
    def _read(self) -> contextlib.AbstractContextManager[None]:
        """A consistent read."""

    @abc.abstractmethod
    def _savepoint(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- instances ---------------------------------------------------------------------------

    def start_instance(self, new: NewInstance, *, now: float) -> tuple[InstanceRecord, bool]:
        with self._write_transaction():
            return self._start_one(new, None, now)

    def start_instances(
        self, starts: Sequence[tuple[NewInstance, StartClaim | None]], *, now: float
    ) -> list[tuple[InstanceRecord, bool] | Exception]:
        results: list[tuple[InstanceRecord, bool] | Exception] = []
        with self._write_transaction():
            if any(claim is not None for _, claim in starts):
                # Claiming here counts concurrency-limit slots as claim() does.
                self._run("lock_limits", {})
            for index, (new, claim) in enumerate(starts):
                try:
                    with self._savepoint(f"s{index}"):
                        results.append(self._start_one(new, claim, now))
                except LedgerflowError as exc:
                    results.append(exc)
        return results

    def _start_one(
        self, new: NewInstance, claim: StartClaim | None, now: float
    ) -> tuple[InstanceRecord, bool]:
        _, inserted = self._run("insert_instance", {**fields(new), "now": now})
        if inserted:
            self._event(new.instance_id, Generation(0), "instance", None, "RUNNING", now, "started")
            if claim is not None:
                # The same rules as a worker's claim (limits included); refused, it stays
                # unowned and an ordinary claim takes it.
                # The lease clock read before the start's: never claim "before" the insert.
                at = None if claim.now is None else max(claim.now, now)
                # A new instance has never lost a lease: the crash-loop bound cannot apply.
                record = self._claim_one(
                    new.instance_id,
                    claim.owner,
                    at,
                    claim.lease_seconds,
                    DEFAULT_BOUNDS.crash_loop_lease_expiries,
                )
                if record is not None:
                    return record, True
        rows, _ = self._run(
            "find_instance",
            {
                "tenant": new.tenant,
                "workflow_name": new.workflow_name,
                "business_key": new.business_key,
            },
        )
        if not rows:
            # The insert was skipped on the primary key, not on the business key.
            raise ConcurrencyError(
                f"instance id {new.instance_id} belongs to another business key",
                instance_id=new.instance_id,
            )
        return instance_from_row(rows[0]), inserted == 1

    def claim(
        self,
        *,
        owner: WorkerId,
        now: float | None,
        lease_seconds: float,
        limit: int,
        lease_expiries_max: int = DEFAULT_BOUNDS.crash_loop_lease_expiries,
        alone: bool = True,
    ) -> list[InstanceRecord]:
        claimed: list[InstanceRecord] = []
        with self._write_transaction():
            # Concurrency limits count owned instances: claims must not count the same slot.
            self._run("lock_limits", {})
            rows, _ = self._run("select_claimable", {"now": now, "limit": limit})
            for row in rows:
                try:
                    with self._savepoint("claim"):
                        record = self._claim_one(
                            row["instance_id"], owner, now, lease_seconds, lease_expiries_max
                        )
                        if record is not None and self._last_chance_refused(
                            record, lease_expiries_max, alone=alone and not claimed
                        ):
                            raise _NotNow
                except _NotNow:
                    continue
                except StorageCorruptError as exc:
                    # A damaged row must not stop healthy instances from being claimed.
                    log.error("not claiming %s: %s", row["instance_id"], exc)
                    self._set_aside_damaged(row["instance_id"], exc, owner=owner, now=now)
                    continue
                if record is not None:
                    claimed.append(record)
                    if detection.is_last_chance(record.lease_expiries, lease_expiries_max):
                        break  # It runs alone: nothing else joins it in this worker.
        return claimed

    def _claim_one(
        self,
        instance_id: str,
        owner: WorkerId,
        now: float | None,
        lease_seconds: float,
        lease_expiries_max: int,
    ) -> InstanceRecord | None:
        got, _ = self._run(
            "claim_instance",
            {
                "instance_id": instance_id,
                "owner": owner,
                "lease_seconds": lease_seconds,
                "lease_expires_at": now + lease_seconds if now is not None else None,
                "now": now,
            },
        )
        if not got:
            return None
        record = instance_from_row(got[0])
        if self._park_crash_loop(got[0], record, lease_expiries_max):
            return None
        # The claim's own time (the database's, where it decides leases).
        at = record.updated_at
        self._event(record.instance_id, record.generation, "owner", None, owner, at, "claimed")
        return record

    def request_cancel(
        self, instance_id: InstanceId, *, reason: str, compensate: bool, now: float
    ) -> tuple[InstanceRecord | None, bool]:
        with self._write_transaction():
            params = {
                "instance_id": instance_id,
                "reason": reason,
                "compensate": int(compensate),
                "now": now,
            }
            self._run("lock_instance", {"instance_id": instance_id})
            _, changed = self._run("request_cancel", params)
            rows, _ = self._run("get_instance", {"instance_id": instance_id})
            record = instance_from_row(rows[0]) if rows else None
            if changed and record is not None:
                self._event(
                    instance_id, record.generation, "cancel", None, "requested", now, reason[:500]
                )
        return record, changed == 1

    def set_limit(self, scope: str, in_flight_max: int | None) -> None:
        with self._write_transaction():
            if in_flight_max is None:
                self._run("delete_limit", {"scope": scope})
            else:
                self._run("set_limit", {"scope": scope, "in_flight_max": in_flight_max})

    def limits(self) -> dict[str, int]:
        with self._read():
            rows, _ = self._run("select_limits", {})
        return {r["scope"]: int(r["in_flight_max"]) for r in rows}

    def cancel_requests(self, *, owner: WorkerId) -> list[InstanceId]:
        with self._read():
            rows, _ = self._run("select_cancel_requests", {"owner": owner})
        return [InstanceId(r["instance_id"]) for r in rows]

    def renew(
        self,
        *,
        owner: WorkerId,
        leases: Sequence[tuple[InstanceId, Generation]],
        now: float | None,
        lease_seconds: float,
    ) -> list[InstanceId]:
        lost: list[InstanceId] = []
        with self._write_transaction():
            for instance_id, generation in leases:
                _, changed = self._run(
                    "renew_lease",
                    {
                        "instance_id": instance_id,
                        "owner": owner,
                        "generation": generation,
                        "lease_seconds": lease_seconds,
                        "lease_expires_at": now + lease_seconds if now is not None else None,
                        "now": now,
                    },
                )
                if changed != 1:
                    lost.append(instance_id)
        return lost

    def commit(self, commits: Sequence[Commit], *, now: float) -> list[Exception | None]:
        # Refusals are rare: first apply the whole group without a savepoint each (two
        # statements, and on PostgreSQL two round trips, fewer per commit). A refusal rolls
        # the whole transaction back; then it is done again, each commit in its savepoint.
        try:
            with self._write_transaction():
                for commit in commits:
                    try:
                        self._apply(commit, now)
                    except LedgerflowError as exc:
                        raise _RefusedError(exc) from exc
            return [None] * len(commits)
        except _RefusedError as refused:
            if len(commits) == 1:
                return [refused.error]
        results: list[Exception | None] = []
        with self._write_transaction():
            for index, commit in enumerate(commits):
                try:
                    with self._savepoint(f"c{index}"):
                        self._apply(commit, now)
                    results.append(None)
                except LedgerflowError as exc:
                    results.append(exc)
        return results

    def _apply(self, commit: Commit, now: float) -> None:
        fence = {"instance_id": commit.instance_id, "generation": commit.generation}
        _, owned = self._run("fence_instance", {**fence, "owner": commit.owner, "now": now})
        if owned != 1 and mutations.ACCEPT_STALE_WRITES not in mutations.active:
            raise FencedOutError(
                "write refused: this owner no longer holds the instance at this generation",
                instance_id=commit.instance_id,
                generation=commit.generation,
            )
        for write in commit.writes:
            if isinstance(write, StepWrite):
                self._write_step(write, commit.generation, now)
            elif isinstance(write, EffectWrite):
                self._write_effect(write, commit.generation, now)
            elif isinstance(write, InstanceWrite):
                self._write_instance(write, commit, now)
            elif isinstance(write, Release):
                self._release(write, commit, now)
            else:
                self._write_inbox(write, commit, now)

    def _write_step(
        self, write: StepWrite, generation: Generation, now: float, *, by_operator: bool = False
    ) -> None:
        r = write.record
        STEP_MACHINE.check_edge(write.expected, r.status, by_operator=by_operator)
        refuse_broken(step_invariant(r), "step", r.command_id)
        params = {**fields(r), "generation": generation, "now": now}
        if write.expected is StepStatus.NEW:
            self._run("insert_step", params)
        else:
            _, changed = self._run("update_step", {**params, "expected": write.expected.value})
            if changed != 1:
                raise IllegalTransitionError(
                    f"step {r.seq} is no longer {write.expected.value}",
                    machine="step",
                    state=write.expected.value,
                    event=r.status.value,
                    instance_id=r.instance_id,
                )
        self._event(
            r.instance_id,
            generation,
            f"step:{r.seq}",
            write.expected.value,
            r.status.value,
            now,
            write.detail,
        )

    def _write_effect(
        self, write: EffectWrite, generation: Generation, now: float, *, by_operator: bool = False
    ) -> None:
        r = write.record
        EFFECT_MACHINE.check_edge(write.expected, r.state, by_operator=by_operator)
        refuse_broken(effect_invariant(r), "effect", r.effect_id)
        params = {**fields(r), "generation": generation, "now": now}
        if write.expected is EffectState.NEW:
            self._run("insert_effect", params)
        else:
            _, changed = self._run("update_effect", {**params, "expected": write.expected.value})
            if changed != 1:
                raise IllegalTransitionError(
                    f"effect {r.effect_id} is no longer {write.expected.value}",
                    machine="effect",
                    state=write.expected.value,
                    event=r.state.value,
                    effect_id=r.effect_id,
                )
        self._event(
            r.instance_id,
            generation,
            f"effect:{r.seq}",
            write.expected.value,
            r.state.value,
            now,
            write.detail,
        )

    def _write_instance(
        self, write: InstanceWrite, commit: Commit, now: float, *, by_operator: bool = False
    ) -> None:
        INSTANCE_MACHINE.check_edge(write.expected, write.status, by_operator=by_operator)
        if write.status is InstanceStatus.FAILED:
            rows, _ = self._run("count_confirmed_effects", {"instance_id": commit.instance_id})
            if rows[0]["n"]:
                raise IllegalTransitionError(
                    f"FAILED says nothing happened, but {rows[0]['n']} effect(s) are confirmed",
                    machine="instance",
                    state=write.expected.value,
                    event=write.status.value,
                    instance_id=commit.instance_id,
                )
        _, changed = self._run(
            "set_status",
            {
                "instance_id": commit.instance_id,
                "generation": commit.generation,
                "status": write.status.value,
                "expected": write.expected.value,
                "result": write.result,
                "reason_code": write.reason_code,
                "reason": write.reason,
                "now": now,
            },
        )
        if changed != 1:
            raise IllegalTransitionError(
                f"instance is no longer {write.expected.value}",
                machine="instance",
                state=write.expected.value,
                event=write.status.value,
                instance_id=commit.instance_id,
            )
        self._event(
            commit.instance_id,
            commit.generation,
            "instance",
            write.expected.value,
            write.status.value,
            now,
            write.detail or write.reason_code,
        )
        if write.release:
            available = write.available_at if write.available_at is not None else now
            # The status change's own event already records the end of ownership.
            self._release(Release(available_at=available), commit, now, with_event=False)
        # The row is the old row merged with this write: check what it became before commit.
        rows, _ = self._run("get_instance", {"instance_id": commit.instance_id})
        try:
            instance_from_row(rows[0])
        except StorageCorruptError as exc:
            raise IllegalTransitionError(f"refused write: {exc.message}") from None

    def _release(
        self, write: Release, commit: Commit, now: float, *, with_event: bool = True
    ) -> None:
        self._run(
            "release_instance",
            {
                "instance_id": commit.instance_id,
                "generation": commit.generation,
                "available_at": write.available_at,
                "now": now,
            },
        )
        if not with_event:
            return
        # Giving up ownership is a change of state too: the timeline shows who let go, when.
        self._event(
            commit.instance_id,
            commit.generation,
            "owner",
            commit.owner,
            "-",
            now,
            f"released until {write.available_at:.3f}",
        )

    def _event(
        self,
        instance_id: InstanceId,
        generation: Generation,
        subject: str,
        from_state: str | None,
        to_state: str,
        now: float,
        detail: str | None,
    ) -> None:
        self._run(
            "insert_event",
            {
                "instance_id": instance_id,
                "generation": generation,
                "subject": subject,
                "from_state": from_state,
                "to_state": to_state,
                "detail": detail,
                "now": now,
            },
        )

    # -- reads -------------------------------------------------------------------------------

    def get_instance(self, instance_id: InstanceId) -> InstanceRecord | None:
        with self._read():
            rows, _ = self._run("get_instance", {"instance_id": instance_id})
        return instance_from_row(rows[0]) if rows else None

    def get_instances(self, instance_ids: Sequence[InstanceId]) -> dict[InstanceId, InstanceRecord]:
        with self._read():
            rows, _ = self._run("get_instances", {"ids": json.dumps(list(instance_ids))})
        records = (instance_from_row(r) for r in rows)
        return {r.instance_id: r for r in records}

    def find_instance(
        self, *, tenant: TenantId, workflow_name: str, business_key: str
    ) -> InstanceRecord | None:
        with self._read():
            rows, _ = self._run(
                "find_instance",
                {"tenant": tenant, "workflow_name": workflow_name, "business_key": business_key},
            )
        return instance_from_row(rows[0]) if rows else None

    def list_instances(
        self,
        *,
        status: InstanceStatus | None = None,
        workflow_name: str | None = None,
        tenant: TenantId | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        with self._read():
            rows, _ = self._run(
                "list_instances",
                {
                    "status": status.value if status else None,
                    "workflow_name": workflow_name,
                    "tenant": tenant,
                    "limit": limit,
                },
            )
        return [instance_from_row(r) for r in rows]

    def journal(self, instance_id: InstanceId, run: RunNumber) -> Journal:
        params = {"instance_id": instance_id, "run": run}
        with self._read():
            steps, _ = self._run("select_steps", params)
            effects, _ = self._run("select_effects", params)
        step_records = [step_from_row(r) for r in steps]
        effect_records = [effect_from_row(r) for r in effects]
        return Journal(
            steps={s.seq: s for s in step_records}, effects={e.seq: e for e in effect_records}
        )

    def effects(self, instance_id: InstanceId) -> list[EffectRecord]:
        with self._read():
            rows, _ = self._run("select_all_effects", {"instance_id": instance_id})
        return [effect_from_row(r) for r in rows]

    def find_effect(self, idempotency_key: str) -> EffectRecord | None:
        with self._read():
            rows, _ = self._run("find_effect_by_key", {"idempotency_key": idempotency_key})
        return effect_from_row(rows[0]) if rows else None

    def events(self, instance_id: InstanceId) -> list[EventRecord]:
        with self._read():
            rows, _ = self._run("select_events", {"instance_id": instance_id})
        return [
            EventRecord(
                event_id=int(r["event_id"]),
                instance_id=InstanceId(r["instance_id"]),
                at=float(r["at"]),
                generation=Generation(int(r["generation"])),
                subject=r["subject"],
                from_state=r["from_state"],
                to_state=r["to_state"],
                detail=r["detail"],
            )
            for r in rows
        ]

    def next_available_at(self) -> float | None:
        with self._read():
            rows, _ = self._run("next_available_at", {"never": limits.WAIT_FOREVER_AT})
        at = rows[0]["at"] if rows else None
        return float(at) if at is not None else None

    def count_by_status(self) -> dict[InstanceStatus, int]:
        with self._read():
            rows, _ = self._run("count_by_status", {})
        return {InstanceStatus(r["status"]): int(r["n"]) for r in rows}
