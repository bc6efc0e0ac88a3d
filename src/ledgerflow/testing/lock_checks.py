"""The oracle's checks of durable locks (internal: the oracle's ``check`` runs them on its
snapshot, and tests call :func:`lock_violations` on a store; a module of its own so that the
oracle's stays within its length bound).

What the store holds must say: at most one holder per lock (the holder row's key makes two
impossible; the check reads it back all the same), no lock held by an instance that ended for
good, no instance that ended for good still queued, and no queue behind a lock nobody holds
(a release always hands the lock on: a free lock with waiters is a lost hand-over). A parked
holder (MANUAL_INTERVENTION, FORWARD_RECOVERY_REQUIRED) keeping its lock is no violation: it
is what a person must decide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ledgerflow.ledger.locks import LockRecord
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.storage.store import Store
from ledgerflow.testing.violations import Violation

ONE_HOLDER = "lock-one-holder"
ENDED_HOLDS = "lock-held-by-ended"
ENDED_WAITS = "lock-waited-by-ended"
FREE_WITH_WAITERS = "lock-free-with-waiters"


def lock_violations(store: Store) -> list[Violation]:
    """Every lock invariant the store's rows break, read in one listing."""
    return locks_held_rightly(store.locks())


def locks_held_rightly(locks: Sequence[LockRecord]) -> list[Violation]:
    """Every lock invariant a listing of the held locks breaks (the oracle's snapshot holds
    one)."""
    found: list[Violation] = []
    holders = Counter((lock.name, lock.tenant) for lock in locks if lock.holder_instance)
    for (name, tenant), count in holders.items():
        if count > 1:
            found.append(Violation(ONE_HOLDER, None, f"{name!r} ({tenant}) has {count} holders"))
    for lock in locks:
        if lock.holder_instance is None and lock.waiters:
            found.append(
                Violation(
                    FREE_WITH_WAITERS,
                    lock.waiters[0].instance_id,
                    f"{lock.name!r} ({lock.tenant}) is free with {len(lock.waiters)} waiting: "
                    "a release did not hand it on",
                )
            )
        if lock.holder_status in FINAL_STATUSES:
            found.append(
                Violation(
                    ENDED_HOLDS,
                    lock.holder_instance,
                    f"holds {lock.name!r} though it ended {lock.holder_status.value}",
                )
            )
        for waiter in lock.waiters:
            if waiter.status in FINAL_STATUSES:
                found.append(
                    Violation(
                        ENDED_WAITS,
                        waiter.instance_id,
                        f"queued for {lock.name!r} though it ended {waiter.status.value}",
                    )
                )
    return found
