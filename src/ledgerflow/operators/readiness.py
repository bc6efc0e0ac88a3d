"""The readiness probe of a server (``GET /readyz``): the journal can be read and written now,
proved at most once per ``limits.READY_PROBE_SECONDS`` (internal).

The probe is open to anyone (a load balancer asks without a token), and it writes: a row of
its own is written and removed again, which is the only proof that the journal takes writes
(a read-only standby, a full disk, a lock held for ever all fail it). So that nobody can make
the server write a journal row per call, or hold its threads on a stalled journal by calling
it in a loop, one probe runs at a time and its verdict (ready, or the error that said why
not) answers every call until the bound has passed. The probe's row is an idempotency claim
of its own scope, swept as any claim past retention is: it never touches another's row.

:func:`migrate_journal` is the other side of a journal's readiness: bringing it to this
Ledgerflow's schema (``ledgerflow migrate``).
"""

from __future__ import annotations

import secrets
import threading

from ledgerflow import limits
from ledgerflow.errors import LedgerflowError
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime.clock import Clock
from ledgerflow.storage import open_store
from ledgerflow.storage.migrations import MigrationStatus
from ledgerflow.storage.store import OperatorStore
from ledgerflow.storage.url import migration_status

__all__ = ["Readiness"]

PROBE_SCOPE = "ledgerflow:ready"


class Readiness:
    """The verdict of the last probe, and when it was made."""

    def __init__(self, store: OperatorStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._probed_at: float | None = None
        self._error: LedgerflowError | None = None

    def check(self) -> None:
        """Nothing when the journal was readable and writable at the last probe (made now
        if the last is older than the bound), else that probe's error."""
        with self._lock:
            now = self._clock.now()
            if self._probed_at is None or now - self._probed_at >= limits.READY_PROBE_SECONDS:
                self._probed_at = now
                self._error = self._probe(now)
            if self._error is not None:
                raise self._error.with_traceback(None)

    def _probe(self, now: float) -> LedgerflowError | None:
        try:
            self._store.get_instance(InstanceId(PROBE_SCOPE))
            key = secrets.token_hex(8)
            self._store.reserve_idempotency(
                scope=PROBE_SCOPE,
                key=key,
                request_hash="",
                now=now,
                cutoff=now - limits.IDEMPOTENCY_RETENTION_SECONDS,
                abandoned_before=now - limits.IDEMPOTENCY_PENDING_SECONDS,
            )
            self._store.release_idempotency(scope=PROBE_SCOPE, key=key, claimed_at=now)
        except LedgerflowError as error:
            return error
        return None


def migrate_journal(url: str) -> MigrationStatus:
    """Bring the journal at ``url`` to this Ledgerflow's schema (creating a missing SQLite
    journal); return where it stood before."""
    before = migration_status(url)
    if before.pending:
        open_store(url, migrate=True).close()
    return before
