"""An instance's inbox as the operators page through it, and the events it refused for being
full (internal).

The inbox keeps every event it takes (:class:`~ledgerflow.ledger.records.Delivery`, with its
payload); a page of it (:class:`InboxEntry`) shows each event's payload only up to
``limits.INBOX_PAYLOAD_SHOWN_BYTES_MAX`` bytes, and its size always, so that an instance's page
stays small whatever its events carry. Events refused because the inbox was past its bounds
are not kept: :class:`InboxRefusals` counts them, one record per instance.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxEntry:
    """One event of an inbox page: a delivery, with its payload when it is small enough to
    show (``payload`` None: ``payload_bytes`` are left out)."""

    instance_id: str
    event_id: str
    name: str
    sender: str | None
    for_seq: int | None
    received_at: float
    state: str
    refusal: str | None
    reason: str | None
    consumed_seq: int | None
    payload_bytes: int
    payload: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxRefusals:
    """The events an instance refused because its inbox was full: how many, when the first and
    the latest came, and what the latest was (never its payload)."""

    instance_id: str
    refused: int
    first_at: float
    last_at: float
    last_event_id: str
    last_name: str
    last_sender: str | None
