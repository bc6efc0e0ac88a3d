"""The read part of the SQL store: instances, journals, effects and timelines (internal).

Every read is one consistent read (:meth:`ReadStore._read`); none of them writes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from ledgerflow import limits
from ledgerflow.ledger.access import InstanceQuery, VersionCount
from ledgerflow.ledger.records import (
    ConsistencySignals,
    EffectRecord,
    InstanceRecord,
    Journal,
    StartedCount,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.model.ids import Generation, InstanceId, RunNumber, StepSeq, TenantId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.routing import Served, served_json
from ledgerflow.storage.rows import (
    Row,
    effect_from_row,
    fields,
    instance_from_row,
    record_from_row,
    step_from_row,
)
from ledgerflow.storage.sql_seam import SqlSeam


class ReadStore(SqlSeam):
    def get_instance(self, instance_id: InstanceId) -> InstanceRecord | None:
        with self._read():
            rows, _ = self._run("get_instance", {"instance_id": instance_id})
        return instance_from_row(rows[0]) if rows else None

    def get_instances(self, instance_ids: Sequence[InstanceId]) -> dict[InstanceId, InstanceRecord]:
        with self._read():
            rows, _ = self._run("get_instances", {"ids": json.dumps(list(instance_ids))})
        records = (instance_from_row(r) for r in rows)
        return {r.instance_id: r for r in records}

    def find_instance(
        self, *, tenant: TenantId, workflow_name: str, business_key: str
    ) -> InstanceRecord | None:
        with self._read():
            rows, _ = self._run(
                "find_instance",
                {"tenant": tenant, "workflow_name": workflow_name, "business_key": business_key},
            )
        return instance_from_row(rows[0]) if rows else None

    def list_instances(
        self,
        *,
        status: InstanceStatus | None = None,
        workflow_name: str | None = None,
        tenant: TenantId | None = None,
        limit: int = 100,
    ) -> list[InstanceRecord]:
        with self._read():
            rows, _ = self._run(
                "list_instances",
                {
                    "status": status.value if status else None,
                    "workflow_name": workflow_name,
                    "tenant": tenant,
                    "limit": limit,
                },
            )
        return [instance_from_row(r) for r in rows]

    def children(self, instance_id: InstanceId, *, limit: int = 100) -> list[InstanceRecord]:
        with self._read():
            rows, _ = self._run("select_children", {"instance_id": instance_id, "limit": limit})
        return [instance_from_row(r) for r in rows]

    def page_instances(self, query: InstanceQuery) -> list[InstanceRecord]:
        """One page of a filtered listing, newest first (keyset: after ``query.after``)."""
        params = fields(query)
        after_at, after_id = params.pop("after") or (None, None)
        flagged = params["flagged"]
        with self._read():
            rows, _ = self._run(
                "page_instances",
                {
                    **params,
                    # 1/0: both dialects compare it with whether an open flag exists.
                    "flagged": None if flagged is None else int(flagged),
                    "after_at": after_at,
                    "after_id": after_id,
                    "limit": max(1, min(query.limit, limits.PAGE_READ_MAX)),
                },
            )
        return [instance_from_row(r) for r in rows]

    def version_counts(self, *, tenant: str | None) -> list[VersionCount]:
        """Instances per workflow, version, fingerprint and status."""
        with self._read():
            rows, _ = self._run("count_versions", {"tenant": tenant})
        return [record_from_row(VersionCount, r) for r in rows]

    def journal(self, instance_id: InstanceId, run: RunNumber) -> Journal:
        return self.journals([(instance_id, run)])[instance_id, run]

    def journals(
        self, wanted: Sequence[tuple[InstanceId, RunNumber]]
    ) -> dict[tuple[InstanceId, RunNumber], Journal]:
        params = {"keys": json.dumps([[instance_id, run] for instance_id, run in wanted])}
        with self._read():
            step_rows, _ = self._run("select_steps", params)
            effect_rows, _ = self._run("select_effects", params)
        steps: dict[tuple[InstanceId, RunNumber], dict[StepSeq, StepRecord]] = {
            key: {} for key in wanted
        }
        effects: dict[tuple[InstanceId, RunNumber], dict[StepSeq, EffectRecord]] = {
            key: {} for key in wanted
        }
        for step in map(step_from_row, step_rows):
            if (key := (step.instance_id, step.run)) in steps:
                steps[key][step.seq] = step
        for effect in map(effect_from_row, effect_rows):
            if (key := (effect.instance_id, effect.run)) in effects:
                effects[key][effect.seq] = effect
        return {key: Journal(steps=steps[key], effects=effects[key]) for key in steps}

    def effects(self, instance_id: InstanceId) -> list[EffectRecord]:
        with self._read():
            rows, _ = self._run("select_all_effects", {"instance_id": instance_id})
        return [effect_from_row(r) for r in rows]

    def find_effect(self, idempotency_key: str) -> EffectRecord | None:
        with self._read():
            rows, _ = self._run("find_effect_by_key", {"idempotency_key": idempotency_key})
        return effect_from_row(rows[0]) if rows else None

    def timeline(self, instance_id: InstanceId) -> list[TimelineEntry]:
        with self._read():
            rows, _ = self._run("select_timeline", {"instance_id": instance_id})
        return [_timeline_entry(r) for r in rows]

    def timeline_page(
        self, instance_id: InstanceId, *, after: int | None, limit: int
    ) -> list[TimelineEntry]:
        """One page of the timeline, oldest first, after the entry numbered ``after``."""
        params = {
            "instance_id": instance_id,
            "after_id": after,
            "limit": max(1, min(limit, limits.PAGE_READ_MAX)),
        }
        with self._read():
            rows, _ = self._run("select_timeline_page", params)
        return [_timeline_entry(r) for r in rows]

    def next_available_at(
        self, serves: Collection[Served] | None = None, adopts: Collection[Served] = ()
    ) -> float | None:
        params = {
            "never": limits.WAIT_FOREVER_AT,
            "serves": None if serves is None else served_json(serves),
            "adopts": served_json(adopts),
        }
        with self._read():
            rows, _ = self._run("next_available_at", params)
        at = rows[0]["at"] if rows else None
        return float(at) if at is not None else None

    def count_by_status(self, *, tenant: str | None = None) -> dict[InstanceStatus, int]:
        with self._read():
            rows, _ = self._run("count_by_status", {"tenant": tenant})
        return {InstanceStatus(r["status"]): int(r["n"]) for r in rows}

    def consistency_signals(self, *, tenant: str | None = None) -> ConsistencySignals:
        params = {"tenant": tenant}
        with self._read():
            parked, _ = self._run("count_parked_by_reason", params)
            flagged, _ = self._run("count_open_flags_by_reason", params)
            unknown, _ = self._run("unknown_effects_open", params)
        oldest = unknown[0]["oldest"] if unknown else None
        return ConsistencySignals(
            parked_by_reason={r["reason"]: int(r["n"]) for r in parked},
            flagged_by_reason={r["reason"]: int(r["n"]) for r in flagged},
            unknown_open=int(unknown[0]["n"]) if unknown else 0,
            unknown_oldest_at=float(oldest) if oldest is not None else None,
        )

    def started_by_bucket(
        self, *, since: float, until: float, bucket_seconds: float, tenant: str | None = None
    ) -> list[StartedCount]:
        if bucket_seconds <= 0 or until <= since:
            raise ValueError(
                "the buckets need a positive width and a window that ends after it starts"
            )
        if (until - since) / bucket_seconds > limits.ACTIVITY_BUCKETS_MAX:
            raise ValueError(f"at most {limits.ACTIVITY_BUCKETS_MAX} buckets are counted at once")
        params = {"since": since, "until": until, "bucket_seconds": bucket_seconds,
                  "tenant": tenant}  # fmt: skip
        with self._read():
            rows, _ = self._run("count_started_by_bucket", params)
        return [
            StartedCount(
                bucket=int(r["bucket"]), status=InstanceStatus(r["status"]), count=int(r["n"])
            )
            for r in rows
        ]


def _timeline_entry(r: Row) -> TimelineEntry:
    return TimelineEntry(
        entry_id=int(r["entry_id"]),
        instance_id=InstanceId(r["instance_id"]),
        at=float(r["at"]),
        generation=Generation(int(r["generation"])),
        subject=r["subject"],
        from_state=r["from_state"],
        to_state=r["to_state"],
        detail=r["detail"],
    )
