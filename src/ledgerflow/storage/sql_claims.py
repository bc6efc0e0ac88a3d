"""The claim part of the SQL store: handing runnable instances to a worker (internal).

A claim takes ownership with a new generation, counted against concurrency limits, only of
instances pinned to a definition the claimer serves (routing by capability, in the SQL), and
hands out no instance that has reached its crash-loop bound (it parks it instead) or whose row is
damaged (set aside and flagged). Both decisions run in the claim's own transaction, so a poison
instance is never handed out once the bound is reached.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import StorageCorruptError
from ledgerflow.ledger.records import InstanceRecord, InstanceWrite
from ledgerflow.model import detection
from ledgerflow.model.detection import DEFAULT_BOUNDS
from ledgerflow.model.effect import EFFECT_MACHINE, EffectEvent, EffectState
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceEvent, InstanceStatus
from ledgerflow.model.routing import Served, served_json
from ledgerflow.storage.rows import Row, instance_from_row
from ledgerflow.storage.sql_seam import SqlSeam

log = logging.getLogger("ledgerflow.storage")

# How many of the latest owners a crash-loop reason names.
CRASH_LOOP_OWNERS_SHOWN = 5


class _NotNow(Exception):  # noqa: N818 - a signal inside the claim loop, not an error
    """Rolls back the claim of one instance that this claim may not take now."""


class _Careful(Exception):  # noqa: N818 - a signal inside the claim, not an error
    """A batched claim met a row that needs one savepoint per row (internal)."""


def claim_params(
    instance_id: str,
    owner: WorkerId,
    now: float | None,
    lease_seconds: float,
    serves: str | None = None,
    retaking: str = "[]",
) -> dict[str, Any]:
    """The parameters of claim_instance; ``serves`` is :func:`served_json` of what the claimer
    runs, or None for a claimer that takes any definition; ``retaking`` the JSON array of the
    instances whose lease the claimer itself lost to its store (see :meth:`ClaimStore.claim`)."""
    return {
        "instance_id": instance_id,
        "owner": owner,
        "lease_seconds": lease_seconds,
        "lease_expires_at": now + lease_seconds if now is not None else None,
        "now": now,
        "serves": serves,
        "retaking": retaking,
    }


class ClaimStore(SqlSeam):
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
        serves: Collection[Served] | None = None,
        retaking: Collection[InstanceId] = (),
    ) -> list[InstanceRecord]:
        """Take up to ``limit`` runnable instances for ``owner``. ``running`` names the
        instances this owner is driving now: they are never handed to it again, even when
        their lease lapsed (a stall held the heartbeat back), so no worker runs two copies
        of one instance; its heartbeat renews them instead. ``serves`` routes by capability:
        only instances pinned to one of these definitions are taken (None: any, for a caller
        that runs no workflow code; a worker always says what it serves). ``retaking`` names
        instances whose lease this owner lost because its own store stalled or failed (not
        because it died): taking one of those back is no lease expiry of the crash-loop count.
        """
        mine = {
            "owner": owner,
            "running": json.dumps(sorted(running)),
            "serves": None if serves is None else served_json(serves),
            "retaking": json.dumps(sorted(retaking)),
        }
        # Most claims take healthy instances: all at once, statements batched. One that meets
        # a damaged row or an instance near its crash-loop bound is done again row by row.
        try:
            with self._write_transaction():
                rows = self._claimable(now, limit, mine)
                return self._claim_all(rows, mine, now, lease_seconds, lease_expiries_max)
        except _Careful:
            pass
        with self._write_transaction():
            rows = self._claimable(now, limit, mine)
            return self._claim_each(rows, mine, now, lease_seconds, lease_expiries_max, alone)

    def _claimable(self, now: float | None, limit: int, mine: dict[str, Any]) -> list[Row]:
        # Concurrency limits count owned instances: claims must not count the same slot.
        self._run("lock_limits", {})
        rows, _ = self._run("select_claimable", {"now": now, "limit": limit, **mine})
        return rows

    def _claim_all(
        self,
        rows: list[Row],
        mine: dict[str, Any],
        now: float | None,
        lease_seconds: float,
        lease_expiries_max: int,
    ) -> list[InstanceRecord]:
        owner = mine["owner"]
        taken: list[list[Row]] = []
        with self._batch():
            for row in rows:
                params = claim_params(
                    row["instance_id"], owner, now, lease_seconds, mine["serves"], mine["retaking"]
                )
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
        mine: dict[str, Any],
        now: float | None,
        lease_seconds: float,
        lease_expiries_max: int,
        alone: bool,
    ) -> list[InstanceRecord]:
        owner = mine["owner"]
        claimed: list[InstanceRecord] = []
        for row in rows:
            try:
                with self._savepoint("claim"):
                    record = self._claim_one(
                        row["instance_id"], mine, now, lease_seconds, lease_expiries_max
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
        mine: dict[str, Any],
        now: float | None,
        lease_seconds: float,
        lease_expiries_max: int,
    ) -> InstanceRecord | None:
        owner = mine["owner"]
        params = claim_params(
            instance_id, owner, now, lease_seconds, mine["serves"], mine["retaking"]
        )
        got, _ = self._run("claim_instance", params)
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

    # -- what a claim refuses to hand out ----------------------------------------------------

    def _park_crash_loop(self, row: Row, record: InstanceRecord, lease_expiries_max: int) -> bool:
        """Park the instance just claimed if its leases ran out ``lease_expiries_max`` times in
        a row: handing it out again would only kill another worker."""
        expiries = int(row["lease_expiries"])
        if not detection.is_crash_loop(expiries, lease_expiries_max=lease_expiries_max):
            return False
        INSTANCE_MACHINE.check(record.status, InstanceEvent.PARK)
        owners, _ = self._run(
            "select_recent_claimers",
            {"instance_id": record.instance_id, "limit": CRASH_LOOP_OWNERS_SHOWN + 1},
        )
        # The newest claim is this one, not an owner that died.
        died = [r["owner"] for r in owners if r["owner"] != record.owner][:CRASH_LOOP_OWNERS_SHOWN]
        reason = detection.crash_loop_reason(expiries, died)
        self._run(
            "park_crash_loop",
            {
                "instance_id": record.instance_id,
                "owner": record.owner,
                "generation": record.generation,
                "reason_code": detection.POISON_CRASH_LOOP,
                "reason": reason,
                "now": record.updated_at,
            },
        )
        self._timeline(
            record.instance_id,
            record.generation,
            "instance",
            record.status.value,
            InstanceStatus.MANUAL_INTERVENTION.value,
            record.updated_at,
            detection.POISON_CRASH_LOOP,
        )
        self._doubt_inflight_effects(record)
        park = InstanceWrite(
            status=InstanceStatus.MANUAL_INTERVENTION,
            expected=record.status,
            event=InstanceEvent.PARK,
            reason_code=detection.POISON_CRASH_LOOP,
            cause=f"{detection.POISON_CRASH_LOOP}: {reason}",
        )
        self._child_ended(record, park, record.generation, record.updated_at)
        log.error("parked %s instead of claiming it: %s", record.instance_id, reason)
        return True

    def _doubt_inflight_effects(self, record: InstanceRecord) -> None:
        """An effect still INTENDED may have reached its participant before the owner died: it
        is parked as UNKNOWN, never left looking as if nothing had been sent."""
        # The edge the statements below write, named by its event (the table must allow it).
        EFFECT_MACHINE.check(EffectState.INTENDED, EffectEvent.LOSE_OUTCOME)
        rows, _ = self._run(
            "select_inflight_effects", {"instance_id": record.instance_id, "run": record.run}
        )
        why = "in flight while its owners kept dying (crash loop); the outcome is unknown"
        for row in rows:
            self._run(
                "doubt_inflight_effect",
                {"effect_id": row["effect_id"], "reason": why, "now": record.updated_at},
            )
            self._timeline(
                record.instance_id,
                record.generation,
                f"effect:{row['seq']}",
                EffectState.INTENDED.value,
                EffectState.UNKNOWN.value,
                record.updated_at,
                detection.POISON_CRASH_LOOP,
            )

    def _last_chance_refused(
        self, record: InstanceRecord, lease_expiries_max: int, *, alone: bool
    ) -> bool:
        """An instance one lapse away from parking runs alone in its worker: if that worker
        dies, the instance is the one that killed it, and instances that merely died beside a
        poison one never reach the bound. Refused unless the claimer holds nothing else."""
        return detection.is_last_chance(record.lease_expiries, lease_expiries_max) and not alone

    def _set_aside_damaged(
        self, instance_id: str, error: StorageCorruptError, *, owner: str, now: float | None
    ) -> None:
        """A damaged row stays unclaimed: flag it once and stop re-reading it every poll."""
        with self._savepoint("damaged"):
            self._run(
                "defer_damaged_instance",
                {"instance_id": instance_id, "never": limits.WAIT_FOREVER_AT},
            )
            self._raise(
                instance_id,
                detection.POISON_CORRUPT_ROW,
                f"claims skip this row, which fails its invariants: {error.message}",
                f"claim:{owner}",
                now,
            )
