"""The adoption part of the SQL store: an instance moved onto a worker's own code, proven by
replay, in the claim's transaction (internal).

When no live worker serves the code an instance is pinned to, a worker that runs another
fingerprint of the same workflow and version replays the instance's journal against its own
code (nothing dispatched, nothing written: :mod:`ledgerflow.runtime.replay`) and, if the replay
is clean, adopts it here: the repin, the claim and the audit record that names the worker and
the replay's verdict are one transaction, conditional on the instance being exactly as the
replay read it (same generation and pin, still due and unheld, the old code still unserved).
Anything else refuses it and nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection

from ledgerflow.errors import StorageCorruptError
from ledgerflow.ledger.audit import Adoption
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.model.routing import Served, served_json
from ledgerflow.storage.rows import instance_from_row
from ledgerflow.storage.sql_claims import claim_params
from ledgerflow.storage.sql_seam import SqlSeam


class _NotAdopted(Exception):  # noqa: N818 - rolls the adoption's transaction back, not an error
    """The instance is not as the adoption found it (or the claim may not take it now)."""


class AdoptionStore(SqlSeam):
    def adoptable(
        self,
        *,
        adopts: Collection[Served],
        live_since: float,
        now: float | None,
        limit: int,
        running: Collection[InstanceId] = (),
    ) -> list[InstanceRecord]:
        """Due instances of the workflows and versions of ``adopts`` pinned to another
        fingerprint that no worker with a heartbeat since ``live_since`` serves, oldest due
        first (rows that fail their invariants are left to the claim, which sets them aside)."""
        params = {
            "adopts": served_json(adopts),
            "live_since": live_since,
            "now": now,
            "limit": limit,
            "running": json.dumps(sorted(running)),
        }
        with self._read():
            rows, _ = self._run("select_adoptable", params)
        found = []
        for row in rows:
            try:
                found.append(instance_from_row(row))
            except StorageCorruptError:
                continue
        return found

    def adopt(
        self, adoption: Adoption, *, owner: WorkerId, now: float | None, lease_seconds: float
    ) -> tuple[InstanceRecord, int] | None:
        """Repin the instance to ``adoption.fingerprint``, claim it for ``owner`` and append
        the audit record, in one transaction; the claimed instance and the audit id, or None
        (nothing written) when it is not as the replay read it or a claim may not take it."""
        target = Served(adoption.workflow_name, adoption.workflow_version, adoption.fingerprint)
        try:
            with self._write_transaction():
                self._run("lock_limits", {})
                _, changed = self._run(
                    "repin_for_adoption",
                    {
                        "instance_id": adoption.instance_id,
                        "generation": adoption.expected_generation,
                        "expected_fingerprint": adoption.expected_fingerprint,
                        "fingerprint": adoption.fingerprint,
                        "live_since": adoption.live_since,
                        "now": now,
                    },
                )
                if changed != 1:
                    raise _NotAdopted
                params = claim_params(
                    adoption.instance_id, owner, now, lease_seconds, served_json([target])
                )
                got, _ = self._run("claim_instance", params)
                if not got:
                    raise _NotAdopted  # a concurrency limit, say: the repin is rolled back
                record = instance_from_row(got[0])
                at = record.updated_at
                entry = dataclasses.replace(
                    adoption.audit,
                    generation_before=adoption.expected_generation,
                    generation_after=record.generation,
                )
                audit_id = self._insert_audit(entry, at)
                self._timeline(
                    record.instance_id,
                    record.generation,
                    "definition",
                    f"v{adoption.workflow_version} {adoption.expected_fingerprint}",
                    f"v{adoption.workflow_version} {adoption.fingerprint}",
                    at,
                    f"adopted by {owner} after a clean replay (audit #{audit_id})",
                )
                self._claimed(record, owner)
        except _NotAdopted:
            return None
        return record, audit_id
