"""The inbox's machine: what becomes of an event delivered to an instance.

An event arrives PENDING (kept for a wait) or, refused at the door (too late for its step or
run, the instance ended, a sender an open approval does not allow), REJECTED. A PENDING event
is then taken by the wait it was for (CONSUMED) or declined (REJECTED: the wait's approval
refuses its sender, or the instance ended before any wait took it). Both ends are final: an
event is decided exactly once. Every module that asks what became of an event asks this
table's states, never a string.
"""

from __future__ import annotations

from enum import StrEnum

from ledgerflow.model.machine import Machine


class DeliveryState(StrEnum):
    PENDING = "PENDING"
    CONSUMED = "CONSUMED"
    REJECTED = "REJECTED"


class DeliveryEvent(StrEnum):
    # A wait takes the event it was waiting for.
    TAKE = "take"
    # A wait or an ending declines a pending event (the reason says why).
    DECLINE = "decline"


DELIVERY_MACHINE: Machine[DeliveryState, DeliveryEvent] = Machine(
    name="inbox",
    table={
        (DeliveryState.PENDING, DeliveryEvent.TAKE): DeliveryState.CONSUMED,
        (DeliveryState.PENDING, DeliveryEvent.DECLINE): DeliveryState.REJECTED,
    },
    terminal=frozenset({DeliveryState.CONSUMED, DeliveryState.REJECTED}),
)


def arrival(*, refused: bool) -> DeliveryState:
    """The state an event is kept in when it arrives: refused at the door, or kept for a wait."""
    return DeliveryState.REJECTED if refused else DeliveryState.PENDING
