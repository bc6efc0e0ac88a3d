"""The start part of the SQL store: new instances, claimed for a worker where asked (internal).

A start inserts the instance unless its business key exists, and may claim it in the same
transaction for a worker in the caller's process. Starts of many callers share a
transaction; its statements are batched, and a start that fails in any way makes the group
start again with a savepoint per start, so each start still gets its own answer.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Sequence
from typing import Any

from ledgerflow.errors import (
    ChildKeyConflictError,
    ConcurrencyError,
    KeyInUseError,
    LedgerflowError,
    VersionRetiredError,
)
from ledgerflow.ledger.records import InstanceRecord, NewInstance, StartClaim
from ledgerflow.model.debounce import DEBOUNCED
from ledgerflow.model.ids import Generation, WorkerId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.start_policy import StartDecision, decide_start
from ledgerflow.storage.rows import Row, fields, instance_from_row
from ledgerflow.storage.sql_claims import claim_params
from ledgerflow.storage.sql_debounce import collapse, database_now, opened, pending_reason
from ledgerflow.storage.sql_seam import RefusedError, SqlSeam


def _keep(into: dict[int, list[Row]], index: int, rows: list[Row], _: int) -> None:
    into[index] = rows


def _start_claim_params(new: NewInstance, claim: StartClaim, now: float) -> dict[str, Any]:
    # The lease clock was read before the start's: never claim "before" the insert. A new
    # instance has never lost a lease, so the crash-loop bound cannot apply to this claim. It
    # needs no capability test either: the starting engine took the definition (and so its
    # fingerprint) from the registry of the very worker that claims it.
    at = None if claim.now is None else max(claim.now, now)
    return claim_params(new.instance_id, claim.owner, at, claim.lease_seconds)


def _due(new: NewInstance, now: float) -> tuple[InstanceStatus, float]:
    """A start's status and due time: SCHEDULED until a start time still to come (a debounced
    start's: its window from now), else RUNNING now."""
    if new.debounce is not None:
        return InstanceStatus.SCHEDULED, now + new.debounce.window_seconds
    if new.available_at is not None and new.available_at > now:
        return InstanceStatus.SCHEDULED, new.available_at
    return InstanceStatus.RUNNING, now


def _scheduled(
    status: InstanceStatus, at: float, new: NewInstance, now: float
) -> tuple[str | None, str | None]:
    """The reason code and reason a SCHEDULED instance shows (``show``, ``list``, the API)."""
    if new.debounce is not None:
        return DEBOUNCED, pending_reason(at, now + new.debounce.max_seconds, 1)
    if status is InstanceStatus.SCHEDULED:
        when = datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds")
        return "scheduled", f"to start at {when} ({at:.3f})"
    return None, None


def _fields(new: NewInstance) -> dict[str, Any]:
    # The debounce is the store's to decide by, not a column.
    params = fields(new)
    del params["debounce"]
    return params


def _insert_params(new: NewInstance, now: float) -> dict[str, Any]:
    status, at = _due(new, now)
    code, reason = _scheduled(status, at, new, now)
    return {
        **_fields(new),
        "now": now,
        "status": status.value,
        "available_at": at,
        "reason_code": code,
        "reason": reason,
    }


# A start that loses the race for a new run reads the instance again and decides again; past
# this many rounds it gives up (someone is starting runs of this key as fast as they end).
NEW_RUN_ROUNDS_MAX = 3


def _find_params(new: NewInstance) -> dict[str, Any]:
    return {
        "tenant": new.tenant,
        "workflow_name": new.workflow_name,
        "business_key": new.business_key,
    }


class StartStore(SqlSeam):
    def _existing(
        self, new: NewInstance, rows: list[Row], inserted: bool
    ) -> tuple[InstanceRecord, bool]:
        """The instance a start found under its business key (inserted, or there before)."""
        if rows:
            return instance_from_row(rows[0]), inserted
        # Nothing was inserted and nothing is there: the version is retired, or the insert
        # was skipped on the primary key, not on the business key.
        version = {"workflow_name": new.workflow_name, "workflow_version": new.workflow_version}
        retired, _ = self._run("select_retired_version", version)
        if retired:
            raise VersionRetiredError(
                f"{new.workflow_name} v{new.workflow_version} is retired (by "
                f"{retired[0]['retired_by']}: {retired[0]['reason']}); it starts no new "
                "instance: start another version",
                workflow=new.workflow_name,
                version=new.workflow_version,
            )
        raise ConcurrencyError(
            f"instance id {new.instance_id} belongs to another business key",
            instance_id=new.instance_id,
        )

    def _start_within(self, new: NewInstance, now: float) -> tuple[InstanceRecord, bool]:
        """A start among another write's statements (a :class:`StartInstance`): the instance
        is inserted, or the one its business key started is kept if it is the same start;
        otherwise the whole transaction is refused. Returns it, and whether it was inserted."""
        return self._start_one(new, None, now)

    def _starts_within(
        self, news: Sequence[NewInstance], now: float
    ) -> list[tuple[InstanceRecord, bool]]:
        """Many starts among another write's statements, as :meth:`_start_within` each, in
        three batches (:meth:`_start_all`) unless a batch is open already; any refusal is
        the whole transaction's."""
        if len(news) == 1 or self._in_batch:
            return [self._start_one(new, None, now) for new in news]
        started = []
        for done in self._start_all([(new, None) for new in news], now):
            assert not isinstance(done, Exception)  # _start_all raises its errors
            started.append(done)
        return started

    def start_instance(self, new: NewInstance, *, now: float) -> tuple[InstanceRecord, bool]:
        with self._write_transaction():
            return self._start_one(new, None, self._starts_now([new], now))

    def _starts_now(self, starts: Sequence[NewInstance], now: float) -> float:
        """The time a transaction of starts decides by: the database's when a debounced start
        asks for it (its due time and a worker's claim are then measured by one clock)."""
        if any(new.debounce is not None and new.debounce.database_clock for new in starts):
            return database_now(self)
        return now

    def start_instances(
        self, starts: Sequence[tuple[NewInstance, StartClaim | None]], *, now: float
    ) -> list[tuple[InstanceRecord, bool] | Exception]:
        # As commits do: the whole group at once, its statements batched; a start that fails
        # in any way makes the group start again, each start in its own savepoint.
        try:
            with self._write_transaction():
                try:
                    return self._start_group(starts, now, savepoints=False)
                except LedgerflowError as exc:
                    raise RefusedError(exc) from exc
        except RefusedError:
            pass
        with self._write_transaction():
            return self._start_group(starts, now, savepoints=True)

    def _start_group(
        self,
        starts: Sequence[tuple[NewInstance, StartClaim | None]],
        now: float,
        *,
        savepoints: bool,
    ) -> list[tuple[InstanceRecord, bool] | Exception]:
        now = self._starts_now([new for new, _ in starts], now)
        if any(claim is not None for _, claim in starts):
            # Claiming here counts concurrency-limit slots as claim() does.
            self._run("lock_limits", {})
        if not savepoints and len(starts) > 1:
            return self._start_all(starts, now)
        if not savepoints:
            # One start alone is cheaper as its few plain statements.
            with self._batch(hold=False):
                return [self._start_one(new, claim, now) for new, claim in starts]
        results: list[tuple[InstanceRecord, bool] | Exception] = []
        for index, (new, claim) in enumerate(starts):
            try:
                with self._savepoint(f"s{index}"):
                    results.append(self._start_one(new, claim, now))
            except LedgerflowError as exc:
                results.append(exc)
        return results

    def _start_all(
        self, starts: Sequence[tuple[NewInstance, StartClaim | None]], now: float
    ) -> list[tuple[InstanceRecord, bool] | Exception]:
        """Every start of a group in three batches (inserts; events and claims; the claims'
        events and the lookups of the rest): three round trips on PostgreSQL, not three per
        start. Any error is the whole group's (the caller then starts each in a savepoint)."""
        fresh: list[bool] = []
        with self._batch():
            for new, _ in starts:
                params = _insert_params(new, now)
                self._send("insert_instance", params, lambda _, n: fresh.append(n == 1))
        claimed: dict[int, list[Row]] = {}
        with self._batch():
            for index, (new, _) in enumerate(starts):
                if fresh[index]:
                    self._started(new, now)
            self._claim_started(starts, fresh, now, claimed)
        # What claim_started left (an instance in a limit's scope): one claim each, as a
        # worker's claim would, each counting the ones before it.
        left = [
            index
            for index, (_, claim) in enumerate(starts)
            if fresh[index] and claim is not None and index not in claimed
        ]
        if left:
            with self._batch():
                for index in left:
                    new, claim = starts[index]
                    assert claim is not None
                    keep = functools.partial(_keep, claimed, index)
                    self._send("claim_instance", _start_claim_params(new, claim, now), keep)
        results: dict[int, tuple[InstanceRecord, bool]] = {}
        found: dict[int, list[Row]] = {}
        with self._batch():
            for index, (new, claim) in enumerate(starts):
                got = claimed.get(index)
                if got and claim is not None:
                    record = instance_from_row(got[0])
                    self._claimed(record, claim.owner)
                    results[index] = (record, True)
                else:
                    keep = functools.partial(_keep, found, index)
                    self._send("find_instance", _find_params(new), keep)
        for index, rows in found.items():
            new = starts[index][0]
            record, created = self._existing(new, rows, fresh[index])
            results[index] = self._resolved(new, record, created, now)
        return [results[index] for index in range(len(starts))]

    def _claim_started(
        self,
        starts: Sequence[tuple[NewInstance, StartClaim | None]],
        fresh: list[bool],
        now: float,
        claimed: dict[int, list[Row]],
    ) -> None:
        """Claim the group's new instances for their owners, one statement per owner and
        lease length (claim_started): one start's claim was a statement of its own, and its
        parameters and answer a third of a group's time. The latest lease clock of a group's
        claims stands for all of them (never before the insert; a lease a little longer than
        the one its worker counts on is safe, a shorter one would not be)."""
        by_claimer: dict[tuple[WorkerId, float], list[tuple[int, StartClaim]]] = {}
        for index, (_, claim) in enumerate(starts):
            if fresh[index] and claim is not None:
                by_claimer.setdefault((claim.owner, claim.lease_seconds), []).append((index, claim))
        for (owner, lease_seconds), group in by_claimer.items():
            clocks = [claim.now for _, claim in group]
            at = None if None in clocks else max([now, *(c for c in clocks if c is not None)])
            positions = {str(starts[index][0].instance_id): index for index, _ in group}
            params = claim_params("", owner, at, lease_seconds)
            params["ids"] = json.dumps(list(positions))

            def keep(rows: list[Row], _: int, positions: dict[str, int] = positions) -> None:
                for row in rows:
                    claimed[positions[row["instance_id"]]] = [row]

            self._send("claim_started", params, keep)

    def _start_one(
        self, new: NewInstance, claim: StartClaim | None, now: float
    ) -> tuple[InstanceRecord, bool]:
        _, inserted = self._run("insert_instance", _insert_params(new, now))
        if inserted:
            self._started(new, now)
            if claim is not None:
                # The same rules as a worker's claim (limits included); refused, it stays
                # unowned and an ordinary claim takes it.
                got, _ = self._run("claim_instance", _start_claim_params(new, claim, now))
                if got:
                    record = instance_from_row(got[0])
                    self._claimed(record, claim.owner)
                    return record, True
        rows, _ = self._run("find_instance", _find_params(new))
        record, created = self._existing(new, rows, inserted == 1)
        return self._resolved(new, record, created, now)

    def _resolved(
        self, new: NewInstance, record: InstanceRecord, created: bool, now: float
    ) -> tuple[InstanceRecord, bool]:
        """What a start under a used key does (model/start_policy.py), in its transaction:
        return the instance, start its next run, or refuse with :class:`KeyInUseError`."""
        for _ in range(NEW_RUN_ROUNDS_MAX):
            if created:
                return record, True
            self._child_link_holds(new, record)
            if new.debounce is not None and (collapsed := collapse(self, new, now)) is not None:
                return collapsed, False
            same = (record.workflow_version, record.input) == (new.workflow_version, new.input)
            decision = decide_start(
                record.status, same_request=same, if_running=new.if_running, if_ended=new.if_ended
            )
            if decision is StartDecision.RETURN:
                return record, False
            if decision is not StartDecision.NEW_RUN:
                raise KeyInUseError(
                    f"business key {new.business_key!r} names {record.workflow_name} "
                    f"v{record.workflow_version} run {record.run}, {record.status.value}: "
                    f"{decision.value}; nothing was started",
                    instance_id=record.instance_id,
                    key=new.business_key,
                    status=record.status.value,
                    run=record.run,
                )
            created = self._new_run(new, record, now)
            rows, _ = self._run("find_instance", _find_params(new))
            record = instance_from_row(rows[0])
        raise ConcurrencyError(
            f"business key {new.business_key!r}: other starts kept starting new runs; try again",
            instance_id=record.instance_id,
        )

    def _child_link_holds(self, new: NewInstance, record: InstanceRecord) -> None:
        """A child's key that another instance holds is never attached to, whatever it runs
        and whatever the start's policy: ChildKeyConflictError."""
        link = (record.parent_instance_id, record.parent_run, record.parent_seq)
        if new.parent_instance_id is not None and link != (
            new.parent_instance_id,
            new.parent_run,
            new.parent_seq,
        ):
            raise ChildKeyConflictError(
                f"the child's business key {new.business_key!r} is held by instance "
                f"{record.instance_id} ({record.workflow_name}), which is not the child of "
                f"{new.parent_instance_id} at step {new.parent_seq}",
                instance_id=new.parent_instance_id,
                holder=record.instance_id,
                key=new.business_key,
            )

    def _new_run(self, new: NewInstance, ended: InstanceRecord, now: float) -> bool:
        """Start run N + 1 of an ended instance; False when another start changed it first."""
        params = {**_insert_params(new, now), "run": ended.run, "ended": ended.status.value}
        status = InstanceStatus(params["status"])
        rows, _ = self._run("start_new_run", params)
        if not rows:
            version = {"workflow_name": new.workflow_name, "workflow_version": new.workflow_version}
            retired, _ = self._run("select_retired_version", version)
            if retired:
                raise VersionRetiredError(
                    f"{new.workflow_name} v{new.workflow_version} is retired; it starts no new "
                    "run: start another version",
                    workflow=new.workflow_name,
                    version=new.workflow_version,
                )
            return False
        started = instance_from_row(rows[0])
        history = {"ended_input": ended.open_run_input, "ended_generation": ended.generation}
        self._run("close_ended_run", {**params, **history})
        detail = f"run {started.run} started after run {ended.run} ended {ended.status.value}"
        detail += f" (if_ended={new.if_ended.value})"
        self._timeline(
            new.instance_id, started.generation, "run", str(ended.run), str(started.run), now,
            detail,
        )  # fmt: skip
        self._timeline(
            new.instance_id, started.generation, "instance", ended.status.value,
            status.value, now, detail,
        )  # fmt: skip
        if new.debounce is not None:
            opened(self, new, started.generation, now)
        return True

    def _started(self, new: NewInstance, now: float) -> None:
        status, at = _due(new, now)
        detail = _scheduled(status, at, new, now)[1] or "started"
        self._timeline(new.instance_id, Generation(0), "instance", None, status.value, now, detail)
        if new.debounce is not None:
            opened(self, new, Generation(0), now)
