"""Sample inputs with the events their waits need: what ``ledgerflow verify`` explores.

A workflow that waits (``ctx.wait_for``, ``ctx.wait_for_approval``) takes what arrives, and
its branches may depend on the payload (approved or not, which carrier shipped) and on who sent
it. The fault explorer delivers an event to every wait it meets; where the payload or the
sender matters, the workflow's author says what may arrive, per event name: each arrival
listed is one option the explorer tries at every wait on that event. The same shape is read
from an :class:`Example` in ``examples=[...]`` and from the JSON file of ``ledgerflow verify
--arrivals FILE``::

    {"events": {"approval": [{"sender": "alice", "payload": {"approved": true}},
                             {"sender": "alice", "payload": {"approved": false}}]},
     "inputs": [{"input": {"order": 7, "vip": true},
                 "events": {"approval": [{"sender": "bob", "payload": {"approved": true}}]}}]}

``events`` applies to every input explored; an input's own ``events`` replace it for the event
names they list. ``payload`` (any JSON value) and ``sender`` (text) are both optional: the
explorer sends ``null``, and for an approval one of its approvers (and, besides, once someone it
refuses). Everything here is checked when it is declared, so a typo fails at import or at the
command line, never halfway through an exploration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import ArrivalsError, PayloadError
from ledgerflow.model.codec import JSON
from ledgerflow.model.names import event_text

ARRIVAL_KEYS = frozenset({"payload", "sender"})
FILE_KEYS = frozenset({"events", "inputs"})
INPUT_KEYS = frozenset({"input", "events"})


@dataclass(frozen=True, slots=True)
class Arrival:
    """One event the explorer may deliver to a wait: its payload and who sends it (None: the
    explorer chooses, an approver for an approval)."""

    payload: Any = None
    sender: str | None = None


# Per event name, the arrivals to try at a wait on it, in order.
Events = Mapping[str, tuple[Arrival, ...]]


@dataclass(frozen=True, slots=True, init=False)
class Example:
    """A sample input for ``ledgerflow verify``, with the events its waits need.

    Example::

        @registry.workflow(name="order", version=1, examples=[
            lf.Example({"order": 1}, events={"approval": [
                {"sender": "alice", "payload": {"approved": True}},
                {"sender": "alice", "payload": {"approved": False}},
            ]}),
        ])
    """

    input: Any
    events: Events

    def __init__(self, input: Any, *, events: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "input", input)
        object.__setattr__(self, "events", parse_events(events or {}, where="Example events"))


def parse_events(document: object, *, where: str) -> dict[str, tuple[Arrival, ...]]:
    """``{event name: [arrival, ...]}`` checked; each arrival a mapping with ``payload``
    and/or ``sender``, or an :class:`Arrival`."""
    if not isinstance(document, Mapping):
        raise ArrivalsError(f"{where}: expected an object of event names, got {_kind(document)}")
    found: dict[str, tuple[Arrival, ...]] = {}
    for name, listed in document.items():
        at = f"{where}[{name!r}]"
        try:
            event = event_text(name, what="event name")
        except PayloadError as exc:
            raise ArrivalsError(f"{at}: {exc.message}") from None
        if not isinstance(listed, list | tuple) or not listed:
            raise ArrivalsError(f"{at}: expected a non-empty list of arrivals")
        if len(listed) > limits.ARRIVALS_PER_EVENT_MAX:
            raise ArrivalsError(
                f"{at}: {len(listed)} arrivals; at most {limits.ARRIVALS_PER_EVENT_MAX} per "
                "event (each is a path the explorer sweeps)"
            )
        found[event] = tuple(_arrival(one, where=f"{at}[{n}]") for n, one in enumerate(listed))
    return found


def _arrival(document: object, *, where: str) -> Arrival:
    if isinstance(document, Arrival):
        document = {"payload": document.payload, "sender": document.sender}
    if not isinstance(document, Mapping):
        raise ArrivalsError(f"{where}: expected an object with payload and/or sender")
    unknown = sorted(set(document) - ARRIVAL_KEYS)
    if unknown:
        raise ArrivalsError(f"{where}: unknown key(s) {unknown}; an arrival has payload, sender")
    sender = document.get("sender")
    if sender is not None:
        try:
            sender = event_text(sender, what="sender")
        except PayloadError as exc:
            raise ArrivalsError(f"{where}: {exc.message}") from None
    payload = document.get("payload")
    try:
        JSON.encode(payload)
    except PayloadError as exc:
        raise ArrivalsError(f"{where}: {exc.message}") from None
    return Arrival(payload=payload, sender=sender)


@dataclass(frozen=True, slots=True)
class ArrivalsFile:
    """What ``ledgerflow verify --arrivals FILE`` reads: events for every input, and inputs to
    explore with events of their own."""

    events: Events
    inputs: tuple[Example, ...]


def parse_arrivals_file(document: object) -> ArrivalsFile:
    """The decoded JSON of an arrivals file, checked (see the module docstring)."""
    if not isinstance(document, Mapping):
        raise ArrivalsError(f"arrivals: expected an object, got {_kind(document)}")
    unknown = sorted(set(document) - FILE_KEYS)
    if unknown:
        raise ArrivalsError(f"arrivals: unknown key(s) {unknown}; the file has events, inputs")
    inputs = document.get("inputs", [])
    if not isinstance(inputs, list):
        raise ArrivalsError(f"arrivals inputs: expected a list, got {_kind(inputs)}")
    return ArrivalsFile(
        events=parse_events(document.get("events", {}), where="arrivals events"),
        inputs=tuple(_input(one, where=f"arrivals inputs[{n}]") for n, one in enumerate(inputs)),
    )


def _input(document: object, *, where: str) -> Example:
    if not isinstance(document, Mapping) or "input" not in document:
        raise ArrivalsError(f"{where}: expected an object with input (and events)")
    unknown = sorted(set(document) - INPUT_KEYS)
    if unknown:
        raise ArrivalsError(f"{where}: unknown key(s) {unknown}; an input has input, events")
    try:
        JSON.encode(document["input"])
    except PayloadError as exc:
        raise ArrivalsError(f"{where}: {exc.message}") from None
    events = parse_events(document.get("events", {}), where=f"{where} events")
    return Example(document["input"], events=events)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
