"""The audit part of the SQL store: repairs applied in one transaction with their audit record
(internal).

A repair is not a worker's commit: it has no lease to prove. It proves instead that the state
it was planned against is still there (generation and status, then each step and effect write
names the state it replaces) and that no worker holds a live lease, takes a new generation so
a stale worker is fenced out, and writes through the same checked step, effect and instance
writes a worker's commit uses (:class:`~ledgerflow.storage.sql_store.SqlStore`), each timeline
entry naming the audit record. Refusals and repeats are appended on their own.
"""

from __future__ import annotations

import dataclasses

from ledgerflow import limits
from ledgerflow.errors import IllegalTransitionError, RepairRefusedError, StalePreconditionError
from ledgerflow.ledger.audit import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    RepairWrite,
    Repin,
)
from ledgerflow.ledger.records import (
    Commit,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    StepWrite,
)
from ledgerflow.model.ids import Generation, InstanceId, WorkerId
from ledgerflow.model.repair import CancelChange
from ledgerflow.storage.rows import fields, instance_from_row, record_from_row
from ledgerflow.storage.sql_seam import SqlSeam

# Where a migration parks a position between its two passes: past any position a step takes.
_MOVE_OFFSET = 1_000_000_000


class AuditStore(SqlSeam):
    # -- writes ------------------------------------------------------------------------------

    def append_audit(self, entry: AuditEntry, *, now: float) -> int:
        """Append one audit record on its own (a refusal or a repeat); return its id."""
        with self._write_transaction():
            return self._insert_audit(entry, now)

    def _insert_audit(self, entry: AuditEntry, now: float) -> int:
        rows, _ = self._run("insert_audit", {**fields(entry), "now": now})
        return int(rows[0]["audit_id"])

    def apply_repair(self, repair: RepairWrite, *, now: float, lease_now: float | None) -> int:
        """Check the precondition, fence, write and audit in one transaction; return the audit
        id. Raises :class:`StalePreconditionError` when the planned state is gone and
        :class:`RepairRefusedError` when a live worker holds the instance; nothing is written
        then."""
        with self._write_transaction():
            current = self._locked(repair)
            generation = current.generation
            if repair.fence:
                generation = self._fence(repair, current, now=now, lease_now=lease_now)
            entry = dataclasses.replace(
                repair.audit, generation_before=current.generation, generation_after=generation
            )
            audit_id = self._insert_audit(entry, now)
            tag = f"repair #{audit_id} by {entry.actor}"
            try:
                self._repair_writes(repair, generation, tag, now)
                for write in repair.writes:
                    if isinstance(write, InstanceWrite):
                        self._child_ended(current, write, generation, now)
                if repair.repin is not None:
                    self._repin(current, repair.repin, generation, tag, now)
            except IllegalTransitionError as exc:
                raise StalePreconditionError(
                    f"the ledger changed since the repair was planned: {exc.message}",
                    instance_id=repair.instance_id,
                ) from None
            self._timeline(
                repair.instance_id,
                generation,
                "repair",
                None,
                entry.kind,
                now,
                f"{tag} (as {entry.role}): {entry.reason}"[:1000],
            )
        return audit_id

    def _locked(self, repair: RepairWrite) -> InstanceRecord:
        rows, _ = self._run("lock_instance", {"instance_id": repair.instance_id})
        if not rows:
            raise RepairRefusedError("no such instance", instance_id=repair.instance_id)
        current = instance_from_row(rows[0])
        if (
            current.generation != repair.expected_generation
            or current.status is not repair.expected_status
        ):
            raise StalePreconditionError(
                f"the repair was planned against {repair.expected_status.value} at generation "
                f"{repair.expected_generation}; the instance is now {current.status.value} at "
                f"generation {current.generation}",
                instance_id=repair.instance_id,
            )
        return current

    def _fence(
        self, repair: RepairWrite, current: InstanceRecord, *, now: float, lease_now: float | None
    ) -> Generation:
        got, _ = self._run(
            "repair_fence",
            {
                "instance_id": repair.instance_id,
                "generation": current.generation,
                "now": now,
                "lease_now": lease_now,
            },
        )
        if not got:
            raise RepairRefusedError(
                f"worker {current.owner} holds a live lease on the instance (until "
                f"{current.lease_expires_at}); a repair never overtakes a running worker",
                instance_id=repair.instance_id,
            )
        return Generation(int(got[0]["generation"]))

    def _repair_writes(
        self, repair: RepairWrite, generation: Generation, tag: str, now: float
    ) -> None:
        # The same checked writes a worker's commit makes, under the repair's generation.
        commit = Commit(
            instance_id=repair.instance_id,
            owner=WorkerId(f"operator:{repair.audit.actor}"),
            generation=generation,
        )
        for write in repair.writes:
            detail = f"{tag}: {write.detail}" if write.detail else tag
            if isinstance(write, StepWrite):
                step = dataclasses.replace(write, detail=detail)
                self._write_step(step, generation, now, by_operator=True)
            elif isinstance(write, EffectWrite):
                effect = dataclasses.replace(write, detail=detail)
                self._write_effect(effect, generation, now, by_operator=True)
            else:
                change = dataclasses.replace(write, detail=detail)
                self._write_instance(change, commit, now, by_operator=True)
        if repair.cancel is not None:
            self._repair_cancel(repair.instance_id, repair.cancel, generation, tag, now)

    def _repin(
        self, current: InstanceRecord, repin: Repin, generation: Generation, tag: str, now: float
    ) -> None:
        """Pin the instance to another definition; move the journal positions a migration
        declares (through positions no step can take, so that two may trade places)."""
        where = {"instance_id": current.instance_id, "run": current.run}
        for moves in (
            [(m.from_seq, m.from_seq + _MOVE_OFFSET, m) for m in repin.moves],  # out
            [(m.from_seq + _MOVE_OFFSET, m.to_seq, m) for m in repin.moves],  # in
        ):
            for source, target, move in moves:
                _, stepped = self._run("move_step", {**where, "from_seq": source, "to_seq": target})
                if stepped != 1:
                    raise IllegalTransitionError(
                        f"journal position {move.from_seq} holds no step to move",
                        instance_id=current.instance_id,
                    )
                if move.effect_id is not None:
                    # In the same two passes as its step: two effects may trade places too
                    # (a gather whose calls a new version makes in another order).
                    self._run(
                        "move_effect",
                        {
                            **where,
                            "from_seq": source,
                            "to_seq": target,
                            "effect_id": move.effect_id,
                            "idempotency_key": move.idempotency_key,
                        },
                    )
        for remap in repin.contracts:
            params = {**where, "seq": remap.seq}
            _, stepped = self._run("remap_step_input", {**params, "input": remap.input})
            _, effected = self._run(
                "remap_effect_contract", {**params, "contract_version": remap.contract_version}
            )
            if (stepped, effected) != (1, 1):
                raise IllegalTransitionError(
                    f"journal position {remap.seq} holds no effect to map",
                    instance_id=current.instance_id,
                )
        _, changed = self._run(
            "repin_instance",
            {
                "instance_id": current.instance_id,
                "generation": generation,
                "expected_version": repin.expected_version,
                "expected_fingerprint": repin.expected_fingerprint,
                "version": repin.version,
                "fingerprint": repin.fingerprint,
                "now": now,
            },
        )
        if changed != 1:
            raise IllegalTransitionError(
                f"the instance is no longer pinned to v{repin.expected_version} "
                f"{repin.expected_fingerprint}",
                instance_id=current.instance_id,
            )
        self._timeline(
            current.instance_id,
            generation,
            "definition",
            f"v{repin.expected_version} {repin.expected_fingerprint}",
            f"v{repin.version} {repin.fingerprint}",
            now,
            tag,
        )

    def _repair_cancel(
        self,
        instance_id: InstanceId,
        cancel: CancelChange,
        generation: Generation,
        tag: str,
        now: float,
    ) -> None:
        _, changed = self._run(
            "request_cancel",
            {
                "instance_id": instance_id,
                "reason": cancel.reason,
                "compensate": int(cancel.compensate),
                "now": now,
            },
        )
        if changed != 1:
            raise IllegalTransitionError(
                "a cancel request exists already or the instance has ended",
                instance_id=instance_id,
            )
        self._timeline(
            instance_id, generation, "cancel", None, "requested", now, f"{tag}: {cancel.reason}"
        )

    # -- reads -------------------------------------------------------------------------------

    def audit_records(self, query: AuditQuery | None = None) -> list[AuditRecord]:
        """Audit records, oldest first: the newest ``query.limit`` that match every filter
        (no query: the newest of all)."""
        query = query or AuditQuery()
        bounded = dataclasses.replace(query, limit=max(1, min(query.limit, limits.AUDIT_LIMIT_MAX)))
        with self._read():
            rows, _ = self._run("select_audit", fields(bounded))
        return [record_from_row(AuditRecord, r) for r in reversed(rows)]

    def last_applied_repair(self, fingerprint: str) -> AuditRecord | None:
        """The latest applied repair with this fingerprint, to recognise a repeat."""
        with self._read():
            rows, _ = self._run("last_applied_audit", {"fingerprint": fingerprint})
        return record_from_row(AuditRecord, rows[0]) if rows else None
