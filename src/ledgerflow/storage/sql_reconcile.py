"""The reconciliation part of the SQL store: which effects to compare, and each run's record
(internal).

Nothing here changes what the ledger claims about an effect: a run only stamps when it last
compared an effect (so bounded runs take turns through the whole ledger) and records itself.
Corrections go through the audited repair path (:mod:`ledgerflow.storage.sql_audit`) and
escalations through attention flags, both owned elsewhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from ledgerflow import limits
from ledgerflow.errors import ConcurrencyError, StorageCorruptError
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import EffectRecord
from ledgerflow.model.ids import EffectId
from ledgerflow.storage.rows import Row, effect_from_row
from ledgerflow.storage.sql_seam import SqlSeam

log = logging.getLogger("ledgerflow.storage")


def _run_from_row(r: Row) -> ReconciliationRun:
    try:
        details = json.loads(r["details"])
    except ValueError:
        # The record is evidence: shown as it is rather than dropped.
        details = [{"unreadable": r["details"]}]
    return ReconciliationRun(
        run_id=int(r["run_id"]),
        actor=r["actor"],
        started_at=float(r["started_at"]),
        finished_at=float(r["finished_at"]) if r["finished_at"] is not None else None,
        compared=int(r["compared"]),
        matched=int(r["matched"]),
        corrected=int(r["corrected"]),
        escalated=int(r["escalated"]),
        unreachable=int(r["unreachable"]),
        details=tuple(details) if isinstance(details, list) else ({"unreadable": details},),
    )


class ReconcileStore(SqlSeam):
    def reconcile_candidates(
        self, *, participants: Sequence[str], limit: int
    ) -> list[EffectRecord]:
        """Up to ``limit`` effects to compare, least recently compared first: CONFIRMED and
        FAILED ones, and UNKNOWN ones of parked instances, of the named participants."""
        if not participants:
            return []
        bounded = max(1, min(limit, limits.RECONCILE_LIMIT_MAX))
        with self._read():
            rows, _ = self._run(
                "select_reconcile_candidates",
                {"participants": json.dumps(sorted(set(participants))), "limit": bounded},
            )
        found: list[EffectRecord] = []
        for row in rows:
            try:
                found.append(effect_from_row(row))
            except StorageCorruptError as exc:
                # A damaged row is not compared (its claims cannot be trusted); detection's
                # corrupt-row flag is how it reaches a person.
                log.error("not reconciling effect %s: %s", row["effect_id"], exc)
        return found

    def begin_reconciliation(self, *, actor: str, now: float) -> int:
        """Record that a run started (so a run whose process dies still shows); its id."""
        with self._write_transaction():
            rows, _ = self._run("insert_reconciliation", {"actor": actor, "now": now})
        return int(rows[0]["run_id"])

    def finish_reconciliation(
        self, run: ReconciliationRun, *, compared_ids: Sequence[EffectId], now: float
    ) -> None:
        """Write a run's counts and details and stamp the effects it compared, in one
        transaction. A run is finished once; finishing it again is refused."""
        if run.run_id is None:
            raise ValueError("a dry run is not recorded")
        with self._write_transaction():
            _, changed = self._run(
                "finish_reconciliation",
                {
                    "run_id": run.run_id,
                    "now": now,
                    "compared": run.compared,
                    "matched": run.matched,
                    "corrected": run.corrected,
                    "escalated": run.escalated,
                    "unreachable": run.unreachable,
                    "details": json.dumps(list(run.details), sort_keys=True, default=str),
                },
            )
            if changed != 1:
                raise ConcurrencyError(
                    f"reconciliation run {run.run_id} does not exist or is already finished",
                    run_id=run.run_id,
                )
            for effect_id in compared_ids:
                self._run("mark_reconciled", {"effect_id": effect_id, "now": run.started_at})

    def reconciliations(self, *, limit: int = 20) -> list[ReconciliationRun]:
        """The newest ``limit`` runs, newest first."""
        bounded = max(1, min(limit, limits.RECONCILE_RUNS_LISTED_MAX))
        with self._read():
            rows, _ = self._run("select_reconciliations", {"limit": bounded})
        return [_run_from_row(r) for r in rows]
