"""What a wait receives: one event from the inbox, with who sent it and when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Signal:
    """An event that answered a wait: a signal, a callback or an approval.

    ``sender`` is the identity the deliverer gave (for an approval, the approver).
    """

    name: str
    payload: Any
    event_id: str
    sender: str | None
    received_at: float

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "payload": self.payload,
            "event_id": self.event_id,
            "sender": self.sender,
            "received_at": self.received_at,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Signal:
        return cls(
            name=str(record["name"]),
            payload=record["payload"],
            event_id=str(record["event_id"]),
            sender=record["sender"],
            received_at=float(record["received_at"]),
        )
