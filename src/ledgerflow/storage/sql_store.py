"""The store logic every SQL backend shares: named queries, row mapping, fenced commits.

A dialect (:mod:`ledgerflow.storage.sqlite`, :mod:`ledgerflow.storage.postgres`) supplies a
connection, how to open a write transaction and a savepoint, and how to map driver errors;
everything else, and in particular the rule that a fenced write touching zero rows is an error,
lives here once. :class:`SqlStore` is the parts of the store (one mixin per concern, side by
side on :class:`~ledgerflow.storage.sql_seam.SqlSeam`) put together, plus the commit itself.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ledgerflow.errors import (
    CancelArrivedError,
    FencedOutError,
    IllegalTransitionError,
    LedgerflowError,
    StorageCorruptError,
)
from ledgerflow.ledger.locks import AcquireLock, LeaveLockQueue, ReleaseLock
from ledgerflow.ledger.records import (
    Commit,
    ContinueRun,
    EffectHeartbeat,
    EffectWrite,
    InstanceWrite,
    KeepTraceContext,
    NoCancelRequest,
    Release,
    StartInstance,
    StepWrite,
)
from ledgerflow.ledger.transaction import Answer, CancelAsked, RequestCancel, Transaction
from ledgerflow.ledger.values import PublishValue
from ledgerflow.model.effect import EFFECT_MACHINE, EffectState
from ledgerflow.model.ids import (
    Generation,
    InstanceId,
    WorkerId,
)
from ledgerflow.model.instance import FINAL_STATUSES, INSTANCE_MACHINE, InstanceStatus
from ledgerflow.model.step import STEP_MACHINE, StepStatus
from ledgerflow.storage.rows import (
    Row,
    effect_invariant,
    fields,
    instance_from_row,
    refuse_broken,
    step_invariant,
)
from ledgerflow.storage.sql_access import AccessStore
from ledgerflow.storage.sql_adoption import AdoptionStore
from ledgerflow.storage.sql_attention import AttentionStore
from ledgerflow.storage.sql_audit import AuditStore
from ledgerflow.storage.sql_claims import ClaimStore
from ledgerflow.storage.sql_flow import FlowStore
from ledgerflow.storage.sql_heartbeats import HeartbeatStore
from ledgerflow.storage.sql_inbox import InboxStore
from ledgerflow.storage.sql_locks import LockStore
from ledgerflow.storage.sql_reads import ReadStore
from ledgerflow.storage.sql_reconcile import ReconcileStore
from ledgerflow.storage.sql_runs import RunStore
from ledgerflow.storage.sql_schedules import ScheduleStore
from ledgerflow.storage.sql_seam import RefusedError
from ledgerflow.storage.sql_starts import StartStore
from ledgerflow.storage.sql_transaction import apply_transaction
from ledgerflow.storage.sql_values import ValueStore
from ledgerflow.storage.sql_versions import VersionStore
from ledgerflow.storage.sql_workers import WorkerStore
from ledgerflow.storage.wake_sources import WakeSource

log = logging.getLogger("ledgerflow.storage")


def _fenced_out(commit: Commit) -> None:
    raise FencedOutError(
        "write refused: this owner no longer holds the instance at this generation",
        instance_id=commit.instance_id,
        generation=commit.generation,
    )


def _one_row_changed(
    what: str, machine: str, expected: enum.Enum, event: enum.Enum, **ids: str
) -> Callable[[list[Row], int], None]:
    """The check of an update expected to change one row: none changed means the row is no
    longer in the state the write expected (someone else moved it)."""

    def updated(_: list[Row], changed: int) -> None:
        if changed != 1:
            raise IllegalTransitionError(
                f"{what} is no longer {expected.value}",
                machine=machine,
                state=expected.value,
                event=event.value,
                **ids,
            )

    return updated


class SqlStore(
    ReadStore,
    StartStore,
    ClaimStore,
    AdoptionStore,
    InboxStore,
    AttentionStore,
    AuditStore,
    ReconcileStore,
    WorkerStore,
    AccessStore,
    VersionStore,
    RunStore,
    ScheduleStore,
    LockStore,
    ValueStore,
    HeartbeatStore,
    FlowStore,
):
    """Shared implementation of :class:`~ledgerflow.storage.store.Store` over named SQL."""

    url: str
    # True when leases are measured by the database's clock (claim and renew then take now=None).
    database_clock: bool = False
    embedded: bool = False

    def __init__(self, queries: Mapping[str, str]) -> None:
        self._q = queries
        # Per thread: the timeline entries a batch holds back until its end (see _batch).
        self._batched = threading.local()

    # -- one transaction around many calls ----------------------------------------------------

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """A write transaction that every call on this store made inside it, on this thread,
        joins: they commit together or not at all. Each call inside is still all or nothing
        on its own (a savepoint): one that raises leaves nothing of itself, and the caller
        decides whether the transaction goes on; an error out of the block rolls all back.
        Blocks nest (the inner one a savepoint). Other threads wait for the outermost to end
        (SQLite) or work beside it (PostgreSQL), as with any write.

        Example::

            with store.transaction():
                delivered = engine.signal(instance_id, "approve", event_id="e-1")
                store.append_audit(entry, now=now)  # on the record with the change, or neither
        """
        return self._write_transaction()

    @contextlib.contextmanager
    def _write_transaction(self) -> Iterator[None]:
        try:
            with self._dialect_write():
                yield
        except LedgerflowError as exc:
            if exc.kept:
                # After the rollback, in the transaction around this one (which makes them
                # again if the error leaves it too) or, outermost, in a transaction of their own.
                with self._dialect_write():
                    for write in exc.kept:
                        write()
            raise

    # -- statements sent in batches (a dialect's pipeline hooks in at _pipeline) -------------

    # A dialect that sends statements without waiting for each answer (PostgreSQL's pipeline)
    # sets this: its refusals then surface at the end of a batch, so a refused group is always
    # done again one savepoint at a time, where each commit meets its own error.
    pipelines: bool = False

    def _send(
        self,
        name: str,
        params: Mapping[str, Any],
        check: Callable[[list[Row], int], None] | None = None,
    ) -> None:
        """Run a named query whose answer only decides whether the transaction may commit.

        Inside :meth:`_batch` a dialect may send it without waiting and call ``check`` with its
        rows and changed-row count at the end of the batch, before anything commits; here it
        runs at once.
        """
        rows, changed = self._run(name, params)
        if check is not None:
            check(rows, changed)

    @contextlib.contextmanager
    def _batch(self, *, hold: bool = True) -> Iterator[None]:
        """Within a write transaction: :meth:`_send` may defer its checks to the block's end,
        and (with ``hold``) the block's timeline entries and new steps go in as one statement
        each at its end (in their order), not one statement each. Nothing inside a batch reads
        the timeline, and a step held back is inserted before anything updates it, so holding them
        changes no answer; an error in them is the whole block's, as any other."""
        # Batches do not nest: a dialect's pipeline and the held writes belong to one block.
        assert not self._in_batch, "a batch inside a batch"
        self._batched.open = True
        timeline: list[dict[str, Any]] = []
        steps: list[dict[str, Any]] = []
        if hold:
            self._batched.timeline, self._batched.steps = timeline, steps
        try:
            with self._pipeline():
                yield
                self._insert_held_steps(steps)
                self._batched.timeline = self._batched.steps = None
                if timeline:
                    self._send("insert_timeline_entries", {"entries": json.dumps(timeline)})
        finally:
            self._batched.timeline = self._batched.steps = None
            self._batched.open = False

    @property
    def _in_batch(self) -> bool:
        return bool(getattr(self._batched, "open", False))

    def _insert_held_steps(self, steps: list[dict[str, Any]]) -> None:
        if steps:
            self._send("insert_steps", {"steps": json.dumps(steps)})
            steps.clear()

    def _pipeline(self) -> contextlib.AbstractContextManager[None]:
        """Statements sent within may be answered at the block's end (checks run then)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def close(self) -> None: ...

    def wake_source(self) -> WakeSource | None:
        """A new worker's push wake-ups from this journal (None: it only polls)."""
        return None

    # -- instances ---------------------------------------------------------------------------

    def request_cancel(self, write: RequestCancel, *, now: float) -> CancelAsked | None:
        instance_id, reason = write.instance_id, write.reason
        with self._write_transaction():
            params = {
                "instance_id": instance_id,
                "reason": reason,
                "compensate": int(write.compensate),
                "now": now,
            }
            self._run("lock_instance", {"instance_id": instance_id})
            _, changed = self._run("request_cancel", params)
            rows, _ = self._run("get_instance", {"instance_id": instance_id})
            record = instance_from_row(rows[0]) if rows else None
            if changed and record is not None:
                self._timeline(
                    instance_id, record.generation, "cancel", None, "requested", now, reason[:500]
                )
        return None if record is None else CancelAsked(instance=record, new=changed == 1)

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

    def apply(self, transaction: Transaction, *, now: float) -> tuple[Answer, ...]:
        """Apply a transaction of typed writes over any number of instances, all or nothing;
        return the store's answer to each of its writes, in order. A refusal of any part
        raises (fenced out, an instance not there or ended, an illegal transition) and nothing
        of it is durable. Inside :meth:`transaction` it joins the caller's transaction."""
        with self._write_transaction():
            return apply_transaction(self, transaction, now)

    def commit(
        self, commits: Sequence[Commit | Transaction], *, now: float
    ) -> list[Exception | None]:
        # Refusals are rare: first apply the whole group without a savepoint each (two
        # statements, and on PostgreSQL two round trips, fewer per commit; its statements are
        # sent without waiting for each answer). A refusal rolls the whole transaction back;
        # then it is done again, each commit in its savepoint, meeting its own error.
        try:
            with self._write_transaction():
                try:
                    # Set-based statements pay off for many commits; one commit alone is
                    # cheaper as the few plain statements it needs.
                    together = len(commits) > 1
                    with self._batch(hold=together):
                        if together:
                            self._fence_all(commits, now)
                        for commit in commits:
                            self._apply_one(commit, now, fenced=together)
                except LedgerflowError as exc:
                    raise RefusedError(exc) from exc
            return [None] * len(commits)
        except RefusedError as refused:
            if len(commits) == 1 and not self.pipelines:
                return [refused.error]
        results: list[Exception | None] = []
        with self._write_transaction():
            for index, commit in enumerate(commits):
                try:
                    with self._savepoint(f"c{index}"):
                        self._apply_one(commit, now)
                    results.append(None)
                except LedgerflowError as exc:
                    results.append(exc)
        return results

    def _apply_one(self, item: Commit | Transaction, now: float, *, fenced: bool = False) -> None:
        if isinstance(item, Commit):
            self._apply(item, now, fenced=fenced)
        else:
            apply_transaction(self, item, now, fenced=fenced)

    def _fence_all(self, items: Sequence[Commit | Transaction], now: float) -> None:
        """The owner fence of every commit of a group in one statement, first, as each
        commit's own fence would be; any commit whose owner lost its instance refuses the
        group (a transaction's fences from outside are its own, checked as it is applied)."""
        commits = [
            commit
            for item in items
            for commit in ((item,) if isinstance(item, Commit) else item.commits)
        ]

        def all_owned(rows: list[Row], _: int) -> None:
            owned = {row["instance_id"] for row in rows}
            for commit in commits:
                if commit.instance_id not in owned:
                    _fenced_out(commit)

        fences = [
            {"instance_id": c.instance_id, "owner": c.owner, "generation": c.generation}
            for c in commits
        ]
        self._send("fence_instances", {"fences": json.dumps(fences), "now": now}, all_owned)

    def _apply(self, commit: Commit, now: float, *, fenced: bool = False) -> None:
        if not fenced:
            fence = {"instance_id": commit.instance_id, "generation": commit.generation}

            def owned(_: list[Row], changed: int) -> None:
                if changed != 1:
                    _fenced_out(commit)

            self._send("fence_instance", {**fence, "owner": commit.owner, "now": now}, owned)
        for write in commit.writes:
            if isinstance(write, StepWrite):
                self._write_step(write, commit.generation, now)
            elif isinstance(write, EffectWrite):
                self._write_effect(write, commit.generation, now)
            elif isinstance(write, InstanceWrite):
                self._write_instance(write, commit, now)
            elif isinstance(write, Release):
                self._release(write, commit, now)
            elif isinstance(write, NoCancelRequest):
                self._no_cancel_request(commit)
            elif isinstance(write, EffectHeartbeat):
                self._heartbeat(write, commit, now)
            elif isinstance(write, StartInstance):
                self._start_within(write.new, now)
            elif isinstance(write, ContinueRun):
                self._continue_run(write, commit, now)
            elif isinstance(write, AcquireLock | ReleaseLock | LeaveLockQueue):
                self._write_lock(write, commit, now)
            elif isinstance(write, PublishValue):
                self._write_value(write, commit, now)
            elif isinstance(write, KeepTraceContext):
                self._send(
                    "keep_trace_context",
                    {"instance_id": commit.instance_id, "trace_context": write.trace_context},
                )
            else:
                self._write_inbox(write, commit, now)

    def _write_step(
        self, write: StepWrite, generation: Generation, now: float, *, by_operator: bool = False
    ) -> None:
        r = write.record
        STEP_MACHINE.check_write(write.expected, write.event, r.status, by_operator=by_operator)
        refuse_broken(step_invariant(r), "step", r.command_id)
        params = {**fields(r), "generation": generation, "now": now}
        updated = _one_row_changed(
            f"step {r.seq}", "step", write.expected, write.event, instance_id=r.instance_id
        )
        held: list[dict[str, Any]] | None = getattr(self._batched, "steps", None)
        if write.expected is StepStatus.NEW and held is not None:
            held.append(params)
        elif write.expected is StepStatus.NEW:
            self._send("insert_step", params)
        else:
            if held:
                self._insert_held_steps(held)  # the step to update may be among them
            self._send("update_step", {**params, "expected": write.expected.value}, updated)
        self._timeline(
            r.instance_id, generation, f"step:{r.seq}", write.expected.value, r.status.value,
            now, write.detail,
        )  # fmt: skip

    def _write_effect(
        self, write: EffectWrite, generation: Generation, now: float, *, by_operator: bool = False
    ) -> None:
        r = write.record
        EFFECT_MACHINE.check_write(write.expected, write.event, r.state, by_operator=by_operator)
        refuse_broken(effect_invariant(r), "effect", r.effect_id)
        params = {**fields(r), "generation": generation, "now": now}
        updated = _one_row_changed(
            f"effect {r.effect_id}", "effect", write.expected, write.event, effect_id=r.effect_id
        )
        if write.expected is EffectState.NEW:
            self._send("insert_effect", params)
        else:
            self._send("update_effect", {**params, "expected": write.expected.value}, updated)
        self._timeline(
            r.instance_id, generation, f"effect:{r.seq}", write.expected.value, r.state.value,
            now, write.detail,
        )  # fmt: skip

    def _write_instance(
        self, write: InstanceWrite, commit: Commit, now: float, *, by_operator: bool = False
    ) -> None:
        INSTANCE_MACHINE.check_write(
            write.expected, write.event, write.status, by_operator=by_operator
        )

        def refused(message: str) -> IllegalTransitionError:
            return IllegalTransitionError(
                message,
                machine="instance",
                state=write.expected.value,
                event=write.event.value,
                instance_id=commit.instance_id,
            )

        def nothing_confirmed(rows: list[Row], _: int) -> None:
            if rows[0]["n"]:
                n = rows[0]["n"]
                raise refused(f"FAILED says nothing happened, but {n} effect(s) are confirmed")

        def changed_one(_: list[Row], changed: int) -> None:
            if changed != 1:
                raise refused(f"instance is no longer {write.expected.value}")

        def well_formed(rows: list[Row], _: int) -> None:
            try:
                instance_from_row(rows[0])
            except StorageCorruptError as exc:
                raise IllegalTransitionError(f"refused write: {exc.message}") from None

        if write.status is InstanceStatus.FAILED:
            params = {"instance_id": commit.instance_id}
            self._send("count_confirmed_effects", params, nothing_confirmed)
        ending = {
            "instance_id": commit.instance_id,
            "generation": commit.generation,
            "status": write.status.value,
            "now": now,
        }
        if write.status in FINAL_STATUSES:
            self._settle_requests(ending)
            self._end_locks(commit.instance_id, now)
        self._send(
            "set_status",
            {
                **ending,
                "expected": write.expected.value,
                "result": write.result,
                "reason_code": write.reason_code,
                "reason": write.reason,
                "cause": write.cause,
            },
            changed_one,
        )
        self._timeline(
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
            # The status change's own entry already records the end of ownership.
            self._release(Release(available_at=available), commit, now, with_entry=False)
        # The row is the old row merged with this write: check what it became before commit.
        self._send("get_instance", {"instance_id": commit.instance_id}, well_formed)

    def _no_cancel_request(self, commit: Commit) -> None:
        def none_asked(rows: list[Row], _: int) -> None:
            if rows and rows[0]["cancel_requested_at"] is not None:
                raise CancelArrivedError(
                    "a cancel request arrived before this step was recorded",
                    instance_id=commit.instance_id,
                )

        self._send("select_cancel_request", {"instance_id": commit.instance_id}, none_asked)

    def _settle_requests(self, ending: dict[str, Any]) -> None:
        """An instance that ends for good answers what it was asked: an accepted cancel request
        is honoured or overtaken, and events no wait took are refused as ended; and it asks its
        live children whose policy says so to cancel (a worker's ending or an operator's). All are
        conditional statements in the ending's own transaction, so a request or an event that
        races the ending is either settled here or refused at delivery, never left open."""
        self._send("note_cancel_settled", ending)
        self._send("settle_cancel_request", ending)
        self._send("close_inbox", ending)
        # Its live children started with on_parent_end="cancel" are asked to cancel.
        self._send("note_children_cancelled", ending)
        self._send("cancel_children", ending)

    def _release(
        self, write: Release, commit: Commit, now: float, *, with_entry: bool = True
    ) -> None:
        self._send(
            "release_instance",
            {
                "instance_id": commit.instance_id,
                "generation": commit.generation,
                "available_at": write.available_at,
                "now": now,
            },
        )
        if not with_entry:
            return
        # Giving up ownership is a change of state too: the timeline shows who let go, when.
        self._timeline(
            commit.instance_id,
            commit.generation,
            "owner",
            commit.owner,
            "-",
            now,
            f"released until {write.available_at:.3f}",
        )

    def _timeline(
        self,
        instance_id: InstanceId,
        generation: Generation,
        subject: str,
        from_state: str | None,
        to_state: str,
        now: float,
        detail: str | None,
    ) -> None:
        entry = {
            "instance_id": instance_id,
            "generation": generation,
            "subject": subject,
            "from_state": from_state,
            "to_state": to_state,
            "detail": detail,
            "now": now,
        }
        held: list[dict[str, Any]] | None = getattr(self._batched, "timeline", None)
        if held is not None:
            held.append(entry)
        else:
            self._send("insert_timeline_entry", entry)
