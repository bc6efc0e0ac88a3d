"""The claim half of the SQL store: handing runnable instances to a worker (internal).

A claim takes ownership with a new generation, counted against concurrency limits, and hands
out no instance that has reached its crash-loop bound (:mod:`ledgerflow.storage.sql_attention`
parks it instead) or whose row is damaged (set aside and flagged).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from ledgerflow.errors import StorageCorruptError
from ledgerflow.model import detection
from ledgerflow.model.detection import DEFAULT_BOUNDS
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.storage.records import InstanceRecord
from ledgerflow.storage.rows import Row, instance_from_row
from ledgerflow.storage.sql_attention import AttentionStore

log = logging.getLogger("ledgerflow.storage")


class _NotNow(Exception):  # noqa: N818 - a signal inside the claim loop, not an error
    """Rolls back the claim of one instance that this claim may not take now."""


class _Careful(Exception):  # noqa: N818 - a signal inside the claim, not an error
    """A batched claim met a row that needs one savepoint per row (internal)."""


def claim_params(
    instance_id: str, owner: WorkerId, now: float | None, lease_seconds: float
) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "owner": owner,
        "lease_seconds": lease_seconds,
        "lease_expires_at": now + lease_seconds if now is not None else None,
        "now": now,
    }


class ClaimStore(AttentionStore):
    def claim(
        self,
        *,
        owner: WorkerId,
        now: float | None,
        lease_seconds: float,
        limit: int,
        lease_expiries_max: int = DEFAULT_BOUNDS.crash_loop_lease_expiries,
        alone: bool = True,
        running: Collection[InstanceId] = (),
    ) -> list[InstanceRecord]:
        """Take up to ``limit`` runnable instances for ``owner``. ``running`` names the
        instances this owner is driving now: they are never handed to it again, even when
        their lease lapsed (a stall held the heartbeat back), so no worker runs two copies
        of one instance; its heartbeat renews them instead."""
        mine = {"owner": owner, "running": json.dumps(sorted(running))}
        # Most claims take healthy instances: all at once, statements batched. One that meets
        # a damaged row or an instance near its crash-loop bound is done again row by row.
        try:
            with self._write_transaction():
                rows = self._claimable(now, limit, mine)
                return self._claim_all(rows, owner, now, lease_seconds, lease_expiries_max)
        except _Careful:
            pass
        with self._write_transaction():
            rows = self._claimable(now, limit, mine)
            return self._claim_each(rows, owner, now, lease_seconds, lease_expiries_max, alone)

    def _claimable(self, now: float | None, limit: int, mine: dict[str, Any]) -> list[Row]:
        # Concurrency limits count owned instances: claims must not count the same slot.
        self._run("lock_limits", {})
        rows, _ = self._run("select_claimable", {"now": now, "limit": limit, **mine})
        return rows

    def _claim_all(
        self,
        rows: list[Row],
        owner: WorkerId,
        now: float | None,
        lease_seconds: float,
        lease_expiries_max: int,
    ) -> list[InstanceRecord]:
        taken: list[list[Row]] = []
        with self._batch():
            for row in rows:
                params = claim_params(row["instance_id"], owner, now, lease_seconds)
                self._send("claim_instance", params, lambda got, _: taken.append(got))
        claimed: list[InstanceRecord] = []
        with self._batch():
            for got in taken:
                if not got:
                    continue
                try:
                    record = instance_from_row(got[0])
                except StorageCorruptError:
                    raise _Careful from None
                expiries = record.lease_expiries
                if detection.is_crash_loop(
                    expiries, lease_expiries_max=lease_expiries_max
                ) or detection.is_last_chance(expiries, lease_expiries_max):
                    raise _Careful
                self._claimed(record, owner)
                claimed.append(record)
        return claimed

    def _claim_each(
        self,
        rows: list[Row],
        owner: WorkerId,
        now: float | None,
        lease_seconds: float,
        lease_expiries_max: int,
        alone: bool,
    ) -> list[InstanceRecord]:
        claimed: list[InstanceRecord] = []
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
        got, _ = self._run("claim_instance", claim_params(instance_id, owner, now, lease_seconds))
        if not got:
            return None
        record = instance_from_row(got[0])
        if self._park_crash_loop(got[0], record, lease_expiries_max):
            return None
        self._claimed(record, owner)
        return record

    def _claimed(self, record: InstanceRecord, owner: WorkerId) -> None:
        # The claim's own time (the database's, where it decides leases).
        at = record.updated_at
        self._timeline(record.instance_id, record.generation, "owner", None, owner, at, "claimed")
