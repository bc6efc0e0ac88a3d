"""What a wait receives: one event from the inbox, with who sent it and when; and the names
no signal may take."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledgerflow.errors import ReservedNameError

# An asynchronous effect's completion is delivered to its step under "complete:" and the
# effect's id (ledgerflow.runtime.completion.completion_event), through the completion path
# only: the participant's callback by the effect's idempotency key, audited as such. A signal
# under that name would confirm the effect with whatever evidence its sender chose.
COMPLETION_PREFIX = "complete:"
# A durable lock's grant is delivered to its waiter under "lock-granted:" and the lock's name,
# by the store, in the transaction that makes it the holder (ledgerflow.runtime.locks): a
# signal under that name would let its sender hand out a lock nobody released.
LOCK_GRANT_PREFIX = "lock-granted:"
# What an update request is delivered under (ledgerflow.ledger.values).
UPDATE_PREFIX = "update:"


def signal_name(name: str) -> str:
    """``name`` if a signal may take it, else :class:`~ledgerflow.errors.ReservedNameError`."""
    if name.startswith(COMPLETION_PREFIX):
        raise ReservedNameError(
            f"signal names starting with {COMPLETION_PREFIX!r} are reserved for an "
            "asynchronous effect's completion: a participant completes an effect by its "
            "idempotency key (engine.complete_effect, POST /v1/effects/completion), never by "
            "a signal",
            name=name,
        )
    if name.startswith(UPDATE_PREFIX):
        raise ReservedNameError(
            f"signal names starting with {UPDATE_PREFIX!r} are reserved for update requests "
            "(engine.update)",
            name=name,
        )
    if name.startswith(LOCK_GRANT_PREFIX):
        raise ReservedNameError(
            f"signal names starting with {LOCK_GRANT_PREFIX!r} are reserved for a durable "
            "lock's grant, which only the store delivers",
            name=name,
        )
    return name


def not_approver(sender: str | None, event: str, approvers: Sequence[str]) -> str:
    """Why an approval wait refuses ``sender``'s event: who sent it (or that nobody is named)
    and who may approve instead."""
    who = "an event with no sender" if sender is None else repr(sender)
    listed = ", ".join(repr(a) for a in approvers)
    return f"{who} may not approve {event!r} (approvers: {listed})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Signal:
    """An event that answered a wait: what ``ctx.wait_for`` and ``ctx.wait_for_approval``
    return.

    Example::

        decision = await ctx.wait_for_approval("approval", approvers=["alice"], timeout=3600)
        if not decision.payload["approved"]:
            raise ledgerflow.BusinessFailure(f"{decision.sender} declined")
    """

    name: str
    """The event's name, as the wait asked for it."""
    payload: Any
    """What the sender sent (JSON); ``None`` when nothing was."""
    event_id: str
    """The delivery's id: a delivery repeated with it is one event."""
    sender: str | None
    """Who sent it, as the deliverer named them: for an approval, the approver (over HTTP the
    token's name); ``None`` when no sender was named."""
    received_at: float
    """When the journal received it (seconds since the epoch)."""

    def to_record(self) -> dict[str, Any]:
        """The signal as the JSON record the journal keeps."""
        return {
            "name": self.name,
            "payload": self.payload,
            "event_id": self.event_id,
            "sender": self.sender,
            "received_at": self.received_at,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Signal:
        """The signal a record written by :meth:`to_record` describes."""
        return cls(
            name=str(record["name"]),
            payload=record["payload"],
            event_id=str(record["event_id"]),
            sender=record["sender"],
            received_at=float(record["received_at"]),
        )
