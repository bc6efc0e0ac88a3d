"""The inbox part of the SQL store: keeping deliveries and the writes that settle them
(internal).

Events come from outside the owner (a caller, a participant's callback, an operator), so
:meth:`InboxStore.deliver` is an unfenced write of its own; taking or refusing an event is part
of the owner's fenced commit (:meth:`InboxStore._write_inbox`).

The inbox is bounded (``limits.INBOX_EVENTS_MAX`` events no wait has taken, their payloads
``limits.INBOX_BYTES_MAX`` bytes, each payload ``limits.EVENT_PAYLOAD_BYTES_MAX``): deliver
checks the bounds in its own transaction, under the instance's lock, before it keeps an event.
An event past them is not kept; it is counted (:meth:`InboxStore.inbox_refusals`) in a
transaction of its own once the refused one has rolled back, as a refused repair is audited.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import (
    EventArrivedError,
    IllegalTransitionError,
    InboxFullError,
    PayloadError,
)
from ledgerflow.ledger.delivery import DELIVERY_MACHINE, DeliveryState, arrival
from ledgerflow.ledger.inbox import InboxEntry, InboxRefusals
from ledgerflow.ledger.records import (
    Commit,
    ConsumeDelivery,
    Delivery,
    InstanceRecord,
    NoPendingDelivery,
    RejectDelivery,
)
from ledgerflow.ledger.transaction import Deliver, Delivered
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.storage.rows import delivery_from_row, instance_from_row, record_from_row
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
        else:
            params = {**ids, "event_id": write.event_id, "reason": write.reason}
            _, changed = self._run("reject_delivery", params)
        pending = DeliveryState.PENDING
        outcome = DELIVERY_MACHINE.check(pending, write.event)
        if changed != 1:
            raise IllegalTransitionError(
                f"event {write.event_id} is no longer pending",
                machine=DELIVERY_MACHINE.name,
                state=pending.value,
                event=write.event.value,
                instance_id=commit.instance_id,
            )
        self._timeline(
            commit.instance_id,
            commit.generation,
            "inbox",
            pending.value,
            outcome.value,
            now,
            write.event_id,
        )

    def deliver(self, write: Deliver, *, now: float) -> Delivered | None:
        """Keep an event for an instance (None if there is no such instance): the delivery as
        stored and whether this call stored it (False: a duplicate event id). ``refuse``
        (refusal, reason) keeps it as refused whatever the instance's state."""
        instance_id, event_id, name = write.instance_id, write.event_id, write.name
        payload, sender, for_seq, run = write.payload, write.sender, write.for_seq, write.run
        ids = {"instance_id": instance_id, "event_id": event_id}
        refused = {**ids, "name": name, "sender": sender, "now": now}
        with self._write_transaction(), self._counted_when_full(refused):
            # The instance's row first: a delivery of the same event id racing this one waits
            # here, so the inbox read after it sees the other's event if it was kept.
            found, _ = self._run("lock_instance", {"instance_id": instance_id})
            if not found:
                return None
            rows, _ = self._run("get_delivery", ids)
            if rows:
                return Delivered(delivery=delivery_from_row(rows[0]), new=False)
            instance = instance_from_row(found[0])
            if write.bounded:
                self._within_inbox_bounds(instance_id, event_id, payload)
            refusal, reason = write.refuse or self._late(instance, for_seq=for_seq, run=run)
            state = arrival(refused=refusal is not None)
            _, inserted = self._run(
                "insert_event_delivery",
                {
                    **ids,
                    "name": name,
                    "payload": payload,
                    "sender": sender,
                    "for_seq": for_seq,
                    "state": state.value,
                    "refusal": refusal,
                    "reason": reason,
                    "now": now,
                },
            )
            if inserted != 1:
                # Kept by another delivery after all (the insert's own conflict): a duplicate.
                rows, _ = self._run("get_delivery", ids)
                return Delivered(delivery=delivery_from_row(rows[0]), new=False)
            if state is DeliveryState.PENDING:
                self._run("wake_instance", {"instance_id": instance_id, "now": now})
            self._timeline(
                instance_id,
                instance.generation,
                "inbox",
                None,
                state.value,
                now,
                f"{name} {event_id}" + (f": {reason}" if reason else ""),
            )
            rows, _ = self._run("get_delivery", ids)
        return Delivered(delivery=delivery_from_row(rows[0]), new=True)

    def _within_inbox_bounds(self, instance_id: InstanceId, event_id: str, payload: str) -> None:
        """:class:`PayloadError` for a payload past its own bound, :class:`InboxFullError` when
        keeping the event would take the inbox past its bounds."""
        size = len(payload.encode("utf-8", "surrogatepass"))
        if size > limits.EVENT_PAYLOAD_BYTES_MAX:
            raise PayloadError(
                f"the event's payload is {size} bytes encoded; at most "
                f"{limits.EVENT_PAYLOAD_BYTES_MAX} are kept"
            )
        rows, _ = self._run("measure_inbox", {"instance_id": instance_id})
        events, held = int(rows[0]["events"]), int(rows[0]["bytes"])
        if events < limits.INBOX_EVENTS_MAX and held + size <= limits.INBOX_BYTES_MAX:
            return
        raise InboxFullError(
            f"the instance's inbox holds {events} events ({held} payload bytes) that no wait "
            f"has taken, at most {limits.INBOX_EVENTS_MAX} events and "
            f"{limits.INBOX_BYTES_MAX} bytes: this {size}-byte event is refused and not kept",
            instance_id=instance_id,
            event_id=event_id,
        )

    @contextlib.contextmanager
    def _counted_when_full(self, refused: dict[str, Any]) -> Iterator[None]:
        # Counted once the refused delivery has rolled back, by every transaction the error
        # leaves (see _write_transaction): the count stands whoever catches the error.
        try:
            yield
        except InboxFullError as exc:
            exc.keep(lambda: self._send("count_inbox_refusal", refused))
            raise

    def inbox_refusals(self, instance_id: InstanceId) -> InboxRefusals | None:
        """The events refused because the instance's inbox was full (None: none ever was)."""
        with self._read():
            rows, _ = self._run("get_inbox_refusals", {"instance_id": instance_id})
        return record_from_row(InboxRefusals, rows[0]) if rows else None

    def inbox_page(
        self, instance_id: InstanceId, *, after: tuple[float, str] | None, limit: int
    ) -> list[InboxEntry]:
        """One page of the inbox, oldest first, after the ``(received_at, event_id)`` position
        ``after``; payloads larger than ``limits.INBOX_PAYLOAD_SHOWN_BYTES_MAX`` left out."""
        after_at, after_id = after or (None, None)
        params = {
            "instance_id": instance_id,
            "after_at": after_at,
            "after_id": after_id,
            "shown_max": limits.INBOX_PAYLOAD_SHOWN_BYTES_MAX,
            "limit": max(1, min(limit, limits.PAGE_READ_MAX)),
        }
        with self._read():
            rows, _ = self._run("select_inbox_page", params)
        return [record_from_row(InboxEntry, r) for r in rows]

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
