"""A caller's transaction that never commits, arriving at a fault point (internal).

``engine.within(connection)`` writes inside a service's own transaction. What the explorer can
drive of it is the journal's side: at each arrival a plan makes (a cancel or a signal at a
fault point, in arrivals and random modes), a service's transaction arrives too, through its
own ``sqlite3`` connection to the run's journal, the worker stopped at that point: it starts an
instance of its own, signals and asks to cancel the scenario's instance -- each through
``within``, with its audit record -- and then dies before its COMMIT (its connection closed
unflushed, which is what a SIGKILL leaves the journal). Where the worker holds the journal's
write lock at that point the caller is told to retry (and writes nothing), as a real one would.

:func:`rolled_back_invisible` is the oracle: after the run, nothing of any such caller is
visible -- no instance under its keys, no event under its ids, no audit record under its actor.
(The caller's own process dying is a real-process test, ``tests/runtime/
test_transactional_start.py``: the simulation runs the worker inline, so the caller here is a
second connection on the worker's own thread.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledgerflow.errors import LedgerflowError, RetryTransactionError
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.codec import Codec
from ledgerflow.model.definition import Registry
from ledgerflow.model.ids import InstanceId
from ledgerflow.runtime.clock import Clock
from ledgerflow.runtime.within import Within
from ledgerflow.storage.lent import Lent, own_sqlite_caller
from ledgerflow.storage.sql_store import SqlStore
from ledgerflow.storage.sql_within import journal_identity
from ledgerflow.storage.store import Store
from ledgerflow.testing.oracle import Violation

ACTOR = "explorer:rolled-back"
KEY_PREFIX = "rolled-back:"
EVENT_PREFIX = "rolled-back-"


class RolledBackCallers:
    """Callers whose transactions die before their COMMIT, one per arrival (see module).

    ``commit`` makes them commit instead: only to prove that the oracle sees what a caller
    leaves behind (a test of the oracle, never of the engine).
    """

    def __init__(self, path: str, *, commit: bool = False) -> None:
        self.path = path
        self.commit = commit
        self.arrived = 0
        self.retried = 0

    def arrive(self, store: Store, **where: Any) -> None:
        """One caller at this point (``where``: the registry, codec and clock of the run, the
        scenario's workflow, input and instance, and the hit's index)."""
        if not isinstance(store, SqlStore):
            return  # a store wrapped to drop connections: the caller needs the journal's own
        # No wait: where the worker holds the write lock at this point, the caller is told to
        # retry at once rather than wait for a worker that waits for it.
        with own_sqlite_caller(self.path, wait_seconds=0) as (lent, commit):
            self._write(store, lent, commit, **where)
        self.arrived += 1

    def _write(
        self,
        store: SqlStore,
        lent: Lent,
        commit: Callable[[], None],
        *,
        registry: Registry,
        codec: Codec,
        clock: Clock,
        workflow: str,
        value: Any,
        instance_id: InstanceId,
        at: int,
    ) -> None:
        try:
            within = Within(
                store=store,
                lent=lent,
                registry=registry,
                codec=codec,
                clock=clock,
                actor=ACTOR,
                role=None,
            )
            within.ready(journal_identity(store))
            within.start(workflow, key=f"{KEY_PREFIX}{at}:{instance_id}", input=value)
            for write in (
                lambda: within.signal(instance_id, "rolled-back", event_id=f"{EVENT_PREFIX}{at}"),
                lambda: within.cancel(instance_id, reason=f"explorer: rolled back at {at}"),
            ):
                try:
                    write()
                except RetryTransactionError:
                    raise
                except LedgerflowError:
                    pass  # an ended instance refuses a cancel: the caller goes on
            if self.commit:
                commit()
        except RetryTransactionError:
            self.retried += 1
        # Leaving closes the connection uncommitted: the caller dies before its COMMIT.


def rolled_back_invisible(store: Store, *, limit: int = 100_000) -> list[Violation]:
    """Nothing a caller wrote inside a transaction that never committed is visible."""
    found: list[Violation] = []
    for instance in store.list_instances(limit=limit):
        iid = instance.instance_id
        if instance.business_key.startswith(KEY_PREFIX):
            found.append(Violation("rolled_back_invisible", iid, "started by a rolled-back caller"))
        for event in store.inbox(iid):
            if event.event_id.startswith(EVENT_PREFIX):
                found.append(
                    Violation("rolled_back_invisible", iid, f"event {event.event_id} kept")
                )
        if instance.cancel_reason and "rolled back at" in instance.cancel_reason:
            found.append(Violation("rolled_back_invisible", iid, "a rolled-back cancel request"))
    for record in store.audit_records(AuditQuery(actor=ACTOR)):
        found.append(
            Violation("rolled_back_invisible", record.instance_id, f"audit {record.audit_id}")
        )
    return found
