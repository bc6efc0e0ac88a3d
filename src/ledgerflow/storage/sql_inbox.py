"""The inbox part of the SQL store: keeping deliveries and the writes that settle them
(internal).

Events come from outside the owner (a caller, a participant's callback, an operator), so
:meth:`InboxStore.deliver` is an unfenced write of its own; taking or refusing an event is part
of the owner's fenced commit (:meth:`InboxStore._write_inbox`).
"""

from __future__ import annotations

from ledgerflow.errors import EventArrivedError, IllegalTransitionError
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.storage.records import (
    Commit,
    ConsumeDelivery,
    Delivery,
    InstanceRecord,
    NoPendingDelivery,
    RejectDelivery,
)
from ledgerflow.storage.rows import delivery_from_row, instance_from_row
from ledgerflow.storage.sql_seam import SqlSeam


class InboxStore(SqlSeam):
    def _write_inbox(
        self,
        write: ConsumeDelivery | RejectDelivery | NoPendingDelivery,
        commit: Commit,
        now: float,
    ) -> None:
        ids = {"instance_id": commit.instance_id}
        if isinstance(write, NoPendingDelivery):
            rows, _ = self._run("count_pending_deliveries", {**ids, "name": write.name})
            if rows[0]["n"]:
                raise EventArrivedError(
                    f"an event {write.name!r} arrived before the timeout was recorded",
                    instance_id=commit.instance_id,
                )
            return
        if isinstance(write, ConsumeDelivery):
            params = {
                **ids,
                "event_id": write.event_id,
                "seq": write.seq,
                "generation": commit.generation,
            }
            _, changed = self._run("consume_delivery", params)
            outcome = "CONSUMED"
        else:
            params = {**ids, "event_id": write.event_id, "reason": write.reason}
            _, changed = self._run("reject_delivery", params)
            outcome = "REJECTED"
        if changed != 1:
            raise IllegalTransitionError(
                f"event {write.event_id} is no longer pending",
                machine="inbox",
                state="PENDING",
                event=outcome,
                instance_id=commit.instance_id,
            )
        self._timeline(
            commit.instance_id, commit.generation, "inbox", "PENDING", outcome, now, write.event_id
        )

    def deliver(
        self,
        *,
        instance_id: InstanceId,
        event_id: str,
        name: str,
        payload: str,
        sender: str | None,
        for_seq: int | None,
        run: int | None,
        refuse: tuple[str, str] | None,
        now: float,
    ) -> tuple[Delivery, bool] | None:
        """Keep an event for an instance (None if there is no such instance). Returns the
        delivery as stored and whether this call stored it (False: a duplicate event id).
        ``refuse`` (refusal, reason) keeps it as refused whatever the instance's state."""
        ids = {"instance_id": instance_id, "event_id": event_id}
        with self._write_transaction():
            # The instance's row first: a delivery of the same event id racing this one waits
            # here, so the inbox read after it sees the other's event if it was kept.
            found, _ = self._run("lock_instance", {"instance_id": instance_id})
            if not found:
                return None
            rows, _ = self._run("get_delivery", ids)
            if rows:
                return delivery_from_row(rows[0]), False
            instance = instance_from_row(found[0])
            refusal, reason = refuse or self._late(instance, for_seq=for_seq, run=run)
            state = "REJECTED" if refusal else "PENDING"
            _, inserted = self._run(
                "insert_event_delivery",
                {
                    **ids,
                    "name": name,
                    "payload": payload,
                    "sender": sender,
                    "for_seq": for_seq,
                    "state": state,
                    "refusal": refusal,
                    "reason": reason,
                    "now": now,
                },
            )
            if inserted != 1:
                # Kept by another delivery after all (the insert's own conflict): a duplicate.
                rows, _ = self._run("get_delivery", ids)
                return delivery_from_row(rows[0]), False
            if state == "PENDING":
                self._run("wake_instance", {"instance_id": instance_id, "now": now})
            self._timeline(
                instance_id,
                instance.generation,
                "inbox",
                None,
                state,
                now,
                f"{name} {event_id}" + (f": {reason}" if reason else ""),
            )
            rows, _ = self._run("get_delivery", ids)
        return delivery_from_row(rows[0]), True

    def _late(
        self, instance: InstanceRecord, *, for_seq: int | None, run: int | None
    ) -> tuple[str | None, str | None]:
        """Whether an event comes too late to change anything, and why: (refusal, reason)."""
        if instance.status in TERMINAL_STATUSES:
            return "ended", f"the instance has ended ({instance.status.value})"
        if run is not None and run != instance.run:
            return "late", f"the event is for run {run}; the instance is on run {instance.run}"
        if for_seq is not None:
            rows, _ = self._run(
                "select_step",
                {"instance_id": instance.instance_id, "run": instance.run, "seq": for_seq},
            )
            if rows and rows[0]["status"] in ("COMPLETED", "FAILED"):
                return "late", f"step {for_seq} is closed ({rows[0]['status']})"
        return None, None

    def delivery(self, instance_id: InstanceId, event_id: str) -> Delivery | None:
        """One event as the inbox holds it now: what became of it, by its id."""
        with self._read():
            rows, _ = self._run("get_delivery", {"instance_id": instance_id, "event_id": event_id})
        return delivery_from_row(rows[0]) if rows else None

    def pending_deliveries(self, instance_id: InstanceId, name: str) -> list[Delivery]:
        with self._read():
            rows, _ = self._run(
                "select_pending_deliveries", {"instance_id": instance_id, "name": name}
            )
        return [delivery_from_row(r) for r in rows]

    def inbox(self, instance_id: InstanceId) -> list[Delivery]:
        with self._read():
            rows, _ = self._run("select_inbox", {"instance_id": instance_id})
        return [delivery_from_row(r) for r in rows]
