"""The attention half of the SQL store: flags, parking poison work in the claim, and the reads
behind detection and the operator's queue (internal).

Flags are unfenced writes of their own (detection is not the instance's owner); the two
decisions taken inside a claim (park a crash loop, set a damaged row aside) run in the claim's
transaction, so a poison instance is never handed out once the bound is reached.
"""

from __future__ import annotations

import logging
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import StorageCorruptError
from ledgerflow.model import detection
from ledgerflow.model.effect import EFFECT_MACHINE, EffectState
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceEvent, InstanceStatus
from ledgerflow.storage.records import AttentionFlag, InstanceRecord
from ledgerflow.storage.rows import Row, instance_from_row
from ledgerflow.storage.sql_seam import SqlSeam

log = logging.getLogger("ledgerflow.storage")

# How many of the latest owners a crash-loop reason names.
CRASH_LOOP_OWNERS_SHOWN = 5
# Open flags one read returns at most.
OPEN_FLAGS_MAX = 10_000


def _flag(r: Row) -> AttentionFlag:
    return AttentionFlag(
        flag_id=int(r["flag_id"]),
        instance_id=InstanceId(r["instance_id"]),
        reason_code=r["reason_code"],
        evidence=r["evidence"],
        detected_at=float(r["detected_at"]),
        detected_by=r["detected_by"],
        cleared_at=r["cleared_at"],
        cleared_by=r["cleared_by"],
        cleared_reason=r["cleared_reason"],
    )


class AttentionStore(SqlSeam):
    # -- flags -------------------------------------------------------------------------------

    def raise_flag(
        self,
        *,
        instance_id: InstanceId,
        reason_code: str,
        evidence: str,
        detected_by: str,
        now: float,
    ) -> bool:
        with self._write_transaction():
            return self._raise(instance_id, reason_code, evidence, detected_by, now)

    def _raise(
        self, instance_id: str, reason_code: str, evidence: str, detected_by: str, now: float | None
    ) -> bool:
        _, inserted = self._run(
            "raise_flag",
            {
                "instance_id": instance_id,
                "reason_code": reason_code,
                "evidence": evidence[:4000],
                "detected_by": detected_by,
                "now": now,
            },
        )
        return inserted == 1

    def clear_flag(
        self,
        *,
        instance_id: InstanceId,
        reason_code: str,
        cleared_by: str,
        reason: str,
        now: float,
    ) -> bool:
        with self._write_transaction():
            _, changed = self._run(
                "clear_flag",
                {
                    "instance_id": instance_id,
                    "reason_code": reason_code,
                    "cleared_by": cleared_by,
                    "reason": reason[:4000],
                    "now": now,
                },
            )
        return changed == 1

    def open_flags(self, instance_id: InstanceId | None = None) -> list[AttentionFlag]:
        with self._read():
            rows, _ = self._run(
                "select_open_flags", {"instance_id": instance_id, "limit": OPEN_FLAGS_MAX}
            )
        return [_flag(r) for r in rows]

    def flags(self, instance_id: InstanceId) -> list[AttentionFlag]:
        """Every flag of one instance, open and cleared, oldest first."""
        with self._read():
            rows, _ = self._run("select_flags", {"instance_id": instance_id})
        return [_flag(r) for r in rows]

    # -- what detection and the queue read ----------------------------------------------------

    def detection_rows(
        self, reason_code: str, *, now: float, cutoff: float, limit: int
    ) -> list[dict[str, Any]]:
        """Candidate rows for one scanned reason: past ``cutoff``, at most ``limit``."""
        params = {"now": now, "cutoff": cutoff, "limit": limit}
        with self._read():
            if reason_code == detection.STUCK_STEP:
                rows, _ = self._run("scan_stuck_steps", params)
            elif reason_code == detection.STUCK_UNCLAIMED:
                rows, _ = self._run("scan_stuck_unclaimed", params)
            elif reason_code == detection.PARTICIPANT_UNRESPONSIVE:
                rows, _ = self._run("scan_silent_effects", params)
            else:
                raise ValueError(f"no scan for reason {reason_code!r}")
        return [dict(r) for r in rows]

    def attention_rows(
        self,
        *,
        tenant: str | None,
        workflow_name: str | None,
        reason_code: str | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Parked instances and open flags (plain columns: a damaged row must still show)."""
        params = {
            "tenant": tenant,
            "workflow_name": workflow_name,
            "reason_code": reason_code,
            "limit": limit,
        }
        with self._read():
            parked, _ = self._run("attention_parked", params)
            flagged, _ = self._run("attention_flagged", params)
        return [dict(r) for r in parked], [dict(r) for r in flagged]

    def attention_effects(self, instance_id: InstanceId) -> list[dict[str, Any]]:
        """Effects in doubt and failed compensations of one instance."""
        with self._read():
            rows, _ = self._run("attention_effects", {"instance_id": instance_id})
        return [dict(r) for r in rows]

    def requeue_repaired(self, instance_id: InstanceId, *, cleared_by: str, now: float) -> bool:
        """A row set aside as damaged that now reads cleanly: make it due again and clear its
        flag, in one transaction. False (nothing changed) while it is still damaged."""
        with self._write_transaction():
            rows, _ = self._run("lock_instance", {"instance_id": instance_id})
            if not rows:
                return False
            try:
                instance_from_row(rows[0])
            except StorageCorruptError:
                return False
            self._run(
                "redue_repaired_instance",
                {"instance_id": instance_id, "now": now, "never": limits.WAIT_FOREVER_AT},
            )
            _, changed = self._run(
                "clear_flag",
                {
                    "instance_id": instance_id,
                    "reason_code": detection.POISON_CORRUPT_ROW,
                    "cleared_by": cleared_by,
                    "reason": "the row reads cleanly again; due now",
                    "now": now,
                },
            )
        return changed == 1

    # -- inside a claim ------------------------------------------------------------------------

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
        log.error("parked %s instead of claiming it: %s", record.instance_id, reason)
        return True

    def _doubt_inflight_effects(self, record: InstanceRecord) -> None:
        """An effect still INTENDED may have reached its participant before the owner died: it
        is parked as UNKNOWN, never left looking as if nothing had been sent."""
        EFFECT_MACHINE.check_edge(EffectState.INTENDED, EffectState.UNKNOWN)
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
