"""The attention part of the SQL store: flags, and the reads behind detection and the operator's
queue (internal).

Flags are unfenced writes of their own (detection is not the instance's owner). The reads
return typed records; the queue's take plain columns of the instance, so that a row damaged
past reading as a record still shows (see :mod:`ledgerflow.ledger.attention`).
"""

from __future__ import annotations

from ledgerflow import limits
from ledgerflow.errors import StorageCorruptError
from ledgerflow.ledger.attention import (
    AttentionFlag,
    AttentionQuery,
    EffectToSettle,
    FlaggedInstance,
    ParkedInstance,
)
from ledgerflow.model import detection
from ledgerflow.model.detection import DueInstance, HeldArrival, QuietInstance, SilentEffect
from ledgerflow.model.ids import InstanceId
from ledgerflow.storage.rows import instance_from_row, record_from_row
from ledgerflow.storage.sql_seam import SqlSeam

# Open flags one read returns at most.
OPEN_FLAGS_MAX = 10_000


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
        # Also a claim's, for a damaged row it sets aside (see sql_claims).
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
        return [record_from_row(AttentionFlag, r) for r in rows]

    def flags(self, instance_id: InstanceId) -> list[AttentionFlag]:
        """Every flag of one instance, open and cleared, oldest first."""
        with self._read():
            rows, _ = self._run("select_flags", {"instance_id": instance_id})
        return [record_from_row(AttentionFlag, r) for r in rows]

    # -- what detection and the queue read ----------------------------------------------------

    def quiet_instances(self, *, now: float, cutoff: float, limit: int) -> list[QuietInstance]:
        """Owned, live leases, no claim or commit since ``cutoff``, no effect in flight."""
        with self._read():
            rows, _ = self._run("scan_stuck_steps", {"now": now, "cutoff": cutoff, "limit": limit})
        return [record_from_row(QuietInstance, r) for r in rows]

    def due_instances(self, *, now: float, cutoff: float, limit: int) -> list[DueInstance]:
        """Runnable and due since ``cutoff``, with no live lease."""
        params = {"now": now, "cutoff": cutoff, "limit": limit}
        with self._read():
            rows, _ = self._run("scan_stuck_unclaimed", params)
        return [record_from_row(DueInstance, r) for r in rows]

    def silent_effects(self, *, now: float, cutoff: float, limit: int) -> list[SilentEffect]:
        """Effects of live instances sent or accepted since ``cutoff`` and not answered."""
        params = {"now": now, "cutoff": cutoff, "limit": limit}
        with self._read():
            rows, _ = self._run("scan_silent_effects", params)
        return [record_from_row(SilentEffect, r) for r in rows]

    def held_arrivals(self, *, now: float, cutoff: float, limit: int) -> list[HeldArrival]:
        """What waiting instances not due hold since ``cutoff`` that would move them on."""
        params = {"now": now, "cutoff": cutoff, "limit": limit}
        with self._read():
            rows, _ = self._run("scan_stuck_arrivals", params)
        return [record_from_row(HeldArrival, r) for r in rows]

    def wake_held(self, instance_id: InstanceId, *, now: float) -> bool:
        """Make a waiting instance due now; False when it is not waiting any more."""
        with self._write_transaction():
            _, changed = self._run("wake_held", {"instance_id": instance_id, "now": now})
        return changed == 1

    def attention_rows(
        self, query: AttentionQuery
    ) -> tuple[list[ParkedInstance], list[FlaggedInstance]]:
        """Parked instances and open flags (plain columns: a damaged row must still show)."""
        params = {
            "tenant": query.tenant,
            "workflow_name": query.workflow,
            "reason_code": query.reason,
            "limit": query.limit,
        }
        with self._read():
            parked, _ = self._run("attention_parked", params)
            flagged, _ = self._run("attention_flagged", params)
        parked_instances = [record_from_row(ParkedInstance, r) for r in parked]
        return parked_instances, [record_from_row(FlaggedInstance, r) for r in flagged]

    def attention_effects(self, instance_id: InstanceId) -> list[EffectToSettle]:
        """Effects in doubt and failed compensations of one instance."""
        with self._read():
            rows, _ = self._run("attention_effects", {"instance_id": instance_id})
        return [record_from_row(EffectToSettle, r) for r in rows]

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
