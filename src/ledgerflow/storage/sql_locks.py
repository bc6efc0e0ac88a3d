"""The locks part of the SQL store: granting, queueing, releasing and handing on a durable
named lock, inside the commit that asks for it (internal).

Every write here runs in the owner's fenced commit (or in an ending's transaction) and takes
the lock's name first (``serialise_lock``: PostgreSQL's transaction lock per name, SQLite's one
write lock), so a queueing and a release of one lock never interleave. A grant is always
delivered as an event into the new holder's inbox in the transaction that makes it the holder:
the holder row and the event commit together, so a waiter is never woken for a lock it does not
hold, nor left asleep holding one. See :mod:`ledgerflow.ledger.locks`.
"""

from __future__ import annotations

import json

from ledgerflow import limits
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.locks import (
    GRANT_SENDER,
    AcquireLock,
    LeaveLockQueue,
    LockRecord,
    LockWaiter,
    ReleaseLock,
    grant_event,
)
from ledgerflow.ledger.records import Commit, InstanceRecord
from ledgerflow.ledger.transaction import Deliver
from ledgerflow.model.ids import InstanceId, TenantId
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.storage.rows import instance_from_row
from ledgerflow.storage.sql_seam import SqlSeam


class LockStore(SqlSeam):
    def _write_lock(
        self, write: AcquireLock | ReleaseLock | LeaveLockQueue, commit: Commit, now: float
    ) -> None:
        instance = instance_from_row(
            self._run("lock_instance", {"instance_id": commit.instance_id})[0][0]
        )
        lock = {"name": write.name, "tenant": str(instance.tenant)}
        self._run("serialise_lock", lock)
        if isinstance(write, AcquireLock):
            mine = {**lock, "instance_id": commit.instance_id, "run": instance.run, "now": now}
            _, granted = self._run("insert_lock_holder", {**mine, "seq": write.seq})
            cycle = None if granted else self._wait_cycle(write.name, instance)
            if granted:
                self._grant(write.name, commit.instance_id, instance.run, write.seq, now)
                what = "granted"
            elif cycle is not None:
                self._refuse_deadlock(write, instance, cycle, now)
                what = "deadlock"
            else:
                self._run("enqueue_lock_waiter", {**mine, "seq": write.seq})
                what = "queued"
            self._timeline(
                commit.instance_id, commit.generation, f"lock:{write.name}", None, what, now,
                f"step {write.seq}",
            )  # fmt: skip
        elif isinstance(write, ReleaseLock):
            held = {**lock, "instance_id": commit.instance_id, "run": write.run, "seq": write.seq}
            _, released = self._run("delete_lock_holder", held)
            if released:
                self._timeline(
                    commit.instance_id, commit.generation, f"lock:{write.name}", "held",
                    "released", now, f"taken at step {write.seq}",
                )  # fmt: skip
                self._hand_on(write.name, str(instance.tenant), now)
        else:
            mine = {"instance_id": commit.instance_id, "run": instance.run, "seq": write.seq}
            self._run("delete_lock_waiter", mine)

    def _wait_cycle(self, name: str, instance: InstanceRecord) -> list[str] | None:
        """The cycle queueing ``instance`` for lock ``name`` would close, as "holder holds
        lock" hops from that lock's holder back to ``instance``; None when there is none. The
        wait-for graph is read under one lock per tenant (``serialise_lock`` of no name), so two
        acquirings that would close one cycle between them are decided one after the other."""
        tenant = str(instance.tenant)
        self._run("serialise_lock", {"name": "", "tenant": tenant})
        rows, _ = self._run("lock_holder", {"name": name, "tenant": tenant})
        if not rows:
            return None
        holder, hops = (
            str(rows[0]["holder_instance"]),
            [f"{rows[0]['holder_instance']} holds {name}"],
        )
        for _ in range(limits.LOCK_WAIT_CHAIN_MAX):
            if holder == instance.instance_id:
                return hops
            waited, _ = self._run("lock_waited_for", {"instance_id": holder})
            if not waited or waited[0]["holder_instance"] is None:
                return None
            holder = str(waited[0]["holder_instance"])
            hops.append(f"{holder} holds {waited[0]['name']}")
        return None

    def _refuse_deadlock(
        self, write: AcquireLock, instance: InstanceRecord, cycle: list[str], now: float
    ) -> None:
        """Answer the acquiring with the cycle instead of a place in the queue: delivered as its
        grant would be, so the lock step takes it, journals it and raises it on every replay."""
        self.deliver(
            Deliver(
                instance_id=instance.instance_id,
                event_id=f"lock-deadlock:{write.name}:{instance.run}:{write.seq}",
                name=grant_event(write.name),
                payload=json.dumps({"lock": write.name, "deadlock": cycle}),
                sender=GRANT_SENDER,
                for_seq=write.seq,
                run=instance.run,
            ),
            now=now,
        )

    def _grant(self, name: str, instance_id: InstanceId, run: int, seq: int, now: float) -> bool:
        """Deliver the grant to the instance now its holder; False when its inbox refused it
        (the waiter's step closed, or it ended): then it must not hold the lock."""
        delivered = self.deliver(
            Deliver(
                instance_id=instance_id,
                event_id=f"lock-grant:{name}:{run}:{seq}",
                name=grant_event(name),
                payload=json.dumps({"lock": name, "granted_at": now}),
                sender=GRANT_SENDER,
                for_seq=seq,
                run=run,
            ),
            now=now,
        )
        return delivered is not None and delivered.delivery.state is DeliveryState.PENDING

    def _hand_on(self, name: str, tenant: str, now: float) -> None:
        """The lock ``name`` is free: hand it to the first waiter whose inbox takes the grant,
        in this transaction (a waiter that can no longer take it leaves the queue)."""
        lock = {"name": name, "tenant": tenant}
        for _ in range(limits.LOCK_HAND_ON_TRIES_MAX):
            rows, _ = self._run("first_lock_waiter", lock)
            if not rows:
                return
            waiter = rows[0]
            ids = {
                "instance_id": waiter["instance_id"],
                "run": int(waiter["run"]),
                "seq": int(waiter["seq"]),
            }
            self._run("delete_lock_waiter", ids)
            self._run("insert_lock_holder", {**lock, **ids, "now": now})
            if self._grant(name, InstanceId(ids["instance_id"]), ids["run"], ids["seq"], now):
                return
            self._run("delete_lock_holder", {**lock, **ids})

    def _end_locks(self, instance_id: InstanceId, now: float) -> None:
        """An instance ends for good: it leaves every queue and releases every lock it holds,
        each handed on to its first waiter, in the ending's transaction."""
        rows, _ = self._run("held_locks", {"instance_id": instance_id})
        if any(row["what"] == "queued" for row in rows):
            self._run("delete_instance_waiters", {"instance_id": instance_id})
        for row in (r for r in rows if r["what"] == "held"):
            lock = {"name": row["name"], "tenant": row["tenant"]}
            self._run("serialise_lock", lock)
            ids = {"instance_id": instance_id, "run": row["holder_run"], "seq": row["holder_seq"]}
            _, released = self._run("delete_lock_holder", {**lock, **ids})
            if released:
                self._hand_on(str(row["name"]), str(row["tenant"]), now)

    def locks(self, *, tenant: TenantId | None = None) -> list[LockRecord]:
        """Every held lock (of ``tenant``, when given) with its holder and queue, and every
        queue of a lock nobody holds, by name; at most ``limits.LOCKS_SHOWN_MAX`` locks and as
        many waiters."""
        params = {"tenant": tenant, "limit": limits.LOCKS_SHOWN_MAX}
        with self._read():
            held, _ = self._run("select_locks", params)
            queued, _ = self._run("select_lock_waiters", params)
        waiters: dict[tuple[str, str], list[LockWaiter]] = {}
        for w in queued:
            waiters.setdefault((w["name"], w["tenant"]), []).append(
                LockWaiter(
                    instance_id=InstanceId(w["instance_id"]),
                    run=int(w["run"]),
                    seq=int(w["seq"]),
                    enqueued_at=float(w["enqueued_at"]),
                    position=int(w["position"]),
                    status=InstanceStatus(w["status"]),
                )
            )
        found = [
            LockRecord(
                name=str(r["name"]),
                tenant=TenantId(r["tenant"]),
                holder_instance=InstanceId(r["holder_instance"]),
                holder_run=int(r["holder_run"]),
                holder_seq=int(r["holder_seq"]),
                granted_at=float(r["granted_at"]),
                holder_status=InstanceStatus(r["holder_status"]),
                waiters=tuple(waiters.pop((r["name"], r["tenant"]), ())),
            )
            for r in held
        ]
        # Queues of a lock nobody holds: a lost hand-over, listed rather than hidden.
        found += [
            LockRecord(
                name=name,
                tenant=TenantId(tenant),
                holder_instance=None,
                holder_run=None,
                holder_seq=None,
                granted_at=None,
                holder_status=None,
                waiters=tuple(queue),
            )
            for (name, tenant), queue in waiters.items()
        ]
        return sorted(found, key=lambda lock: (lock.name, lock.tenant))
