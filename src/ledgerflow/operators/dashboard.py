"""What the console's home page counts: instances by status, the consistency signals (open
UNKNOWN outcomes and the oldest's age, parked and flagged instances by reason) and the
instances started over the last day by hour and where they are now (internal).

Three reads of the store, each of one tenant for a scoped principal (the same queries the
metrics' gauges use, with a tenant): the page shows what the principal may see and nothing
of another tenant's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.ledger.records import ConsistencySignals, StartedCount
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.storage.store import Store

__all__ = ["Dashboard", "dashboard"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Dashboard:
    statuses: dict[InstanceStatus, int]
    signals: ConsistencySignals
    started: list[StartedCount]
    # The activity window: [since, now), in buckets of bucket_seconds.
    since: float
    now: float
    bucket_seconds: float
    buckets: int

    @property
    def unknown_oldest_age(self) -> float | None:
        """Seconds since the oldest open UNKNOWN outcome last changed (None: none open)."""
        oldest = self.signals.unknown_oldest_at
        return None if oldest is None else max(0.0, self.now - oldest)


def dashboard(store: Store, *, tenant: str | None, now: float) -> Dashboard:
    """The home page's counts for ``tenant`` (None: every tenant) as of ``now``; the window
    ends at the next whole bucket so that a bar is a clock hour."""
    width = float(limits.ACTIVITY_BUCKET_SECONDS)
    buckets = int(limits.ACTIVITY_WINDOW_SECONDS // limits.ACTIVITY_BUCKET_SECONDS)
    until = (now // width + 1) * width
    since = until - buckets * width
    return Dashboard(
        statuses=store.count_by_status(tenant=tenant),
        signals=store.consistency_signals(tenant=tenant),
        started=store.started_by_bucket(
            since=since, until=until, bucket_seconds=width, tenant=tenant
        ),
        since=since,
        now=now,
        bucket_seconds=width,
        buckets=buckets,
    )
