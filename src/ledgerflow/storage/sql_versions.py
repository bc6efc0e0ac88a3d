"""The definition-versions part of the SQL store: in flight per version, retirements
(internal).

A retirement reads its evidence and writes the retired version with its audit record in one
transaction that holds starts back (``lock_instances_for_retirement``); the start's own insert
refuses a retired version (``insert_instance``), so no instance can slip onto a version in the
moment it is retired.
"""

from __future__ import annotations

import dataclasses

from ledgerflow.ledger.versions import InFlight, RetiredVersion, RetirementEvidence
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.storage.rows import record_from_row
from ledgerflow.storage.sql_seam import SqlSeam

_FINAL = {s.value for s in FINAL_STATUSES}


class VersionStore(SqlSeam):
    def oldest_in_flight(self, *, tenant: str | None) -> list[InFlight]:
        """Per workflow, version and fingerprint: its oldest instance not ended for good."""
        with self._read():
            rows, _ = self._run("oldest_in_flight", {"tenant": tenant})
        return [record_from_row(InFlight, r) for r in rows]

    def retired_versions(self) -> list[RetiredVersion]:
        with self._read():
            rows, _ = self._run("select_retired_versions", {})
        return [record_from_row(RetiredVersion, r) for r in rows]

    def retirement_evidence(self, workflow_name: str, workflow_version: int) -> RetirementEvidence:
        """The version's evidence, read under the lock that keeps every instance's start and
        status as it is until the transaction around this call ends."""
        with self._write_transaction():
            self._run("lock_instances_for_retirement", {})
            return self._evidence(workflow_name, workflow_version)

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
        """Retire a version, on the record of audit entry ``audit_id``."""
        with self._write_transaction():
            self._run(
                "insert_retired_version",
                {
                    "workflow_name": workflow_name,
                    "workflow_version": workflow_version,
                    "retired_by": retired_by,
                    "reason": reason,
                    "audit_id": audit_id,
                    "now": now,
                },
            )

    def _evidence(self, workflow_name: str, workflow_version: int) -> RetirementEvidence:
        params = {"workflow_name": workflow_name, "workflow_version": workflow_version}
        counted, _ = self._run("count_version_statuses", params)
        oldest, _ = self._run("oldest_in_flight_of_version", params)
        ended, _ = self._run("last_ended_of_version", params)
        retired, _ = self._run("select_retired_version", params)
        statuses = {str(r["status"]): int(r["instances"]) for r in counted}
        evidence = RetirementEvidence(
            workflow_name=workflow_name,
            workflow_version=workflow_version,
            statuses=statuses,
            in_flight=sum(n for s, n in statuses.items() if s not in _FINAL),
            retired=record_from_row(RetiredVersion, retired[0]) if retired else None,
        )
        if oldest:
            evidence = dataclasses.replace(
                evidence,
                oldest_in_flight_id=str(oldest[0]["instance_id"]),
                oldest_in_flight_at=float(oldest[0]["created_at"]),
            )
        if ended:
            evidence = dataclasses.replace(
                evidence,
                last_ended_id=str(ended[0]["instance_id"]),
                last_ended_status=str(ended[0]["status"]),
                last_ended_at=float(ended[0]["updated_at"]),
            )
        return evidence
