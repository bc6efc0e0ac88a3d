"""Scripts of arrivals for ``ledgerflow verify``: ``Example(events=...)`` and the ``--arrivals``
file, checked where they are declared (a typo fails at import, not halfway through a sweep)."""

from __future__ import annotations

from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow import limits
from ledgerflow.errors import ArrivalsError, ConfigurationError
from ledgerflow.model.examples import Arrival, parse_arrivals_file


def test_an_example_carries_its_events_as_arrivals() -> None:
    """Goal: an example's events become arrivals, payload and sender kept, both optional.

    Method: declare an example with two arrivals for one event (one with a sender) and one
    for another (empty); read them back; an ``Arrival`` given as is stays one.
    """
    example = lf.Example(
        {"order": 1},
        events={
            "approval": [{"sender": "alice", "payload": {"ok": True}}, {"payload": 3}],
            "shipped": [{}, Arrival(sender="bob")],
        },
    )
    assert example.input == {"order": 1}
    assert example.events == {
        "approval": (Arrival({"ok": True}, "alice"), Arrival(3, None)),
        "shipped": (Arrival(None, None), Arrival(None, "bob")),
    }
    assert lf.Example(5).events == {}


@pytest.mark.parametrize(
    ("events", "said"),
    [
        ({"approval": {"sender": "alice"}}, "non-empty list"),
        ({"approval": []}, "non-empty list"),
        ({"approval": [{"from": "alice"}]}, "unknown key(s) ['from']"),
        ({"approval": [{"sender": 7}]}, "sender must be a string"),
        ({"approval": [{"payload": {1, 2}}]}, "not JSON-serialisable"),
        ({" approval": [{}]}, "must not begin or end with whitespace"),
        ({"approval": [{}] * (limits.ARRIVALS_PER_EVENT_MAX + 1)}, "at most 20 per event"),
        (["approval"], "expected an object of event names"),
    ],
)
def test_a_malformed_script_is_refused_where_it_is_declared(events: Any, said: str) -> None:
    """Goal: every malformed script is an ``ArrivalsError`` (LF107, a configuration error)
    saying what and where.

    Method: one malformed script per rule; the message names the rule and the event.
    """
    with pytest.raises(ArrivalsError) as caught:
        lf.Example({"order": 1}, events=events)
    assert said in str(caught.value)
    assert caught.value.code == "LF107"
    assert isinstance(caught.value, ConfigurationError)


def test_an_arrivals_file_has_events_and_inputs_with_their_own() -> None:
    """Goal: the ``--arrivals`` document: events for every input, and inputs with events of
    their own; anything else is refused by name.

    Method: parse a file with both keys; then a typo of ``events`` and an input without
    ``input`` are refused with their keys named.
    """
    parsed = parse_arrivals_file(
        {
            "events": {"approval": [{"sender": "alice"}]},
            "inputs": [{"input": {"vip": True}, "events": {"approval": [{"sender": "bob"}]}}],
        }
    )
    assert parsed.events == {"approval": (Arrival(None, "alice"),)}
    [example] = parsed.inputs
    assert (example.input, example.events) == ({"vip": True}, {"approval": (Arrival(None, "bob"),)})
    with pytest.raises(ArrivalsError, match=r"unknown key\(s\) \['event'\]"):
        parse_arrivals_file({"event": {}})
    with pytest.raises(ArrivalsError, match=r"inputs\[0\]: expected an object with input"):
        parse_arrivals_file({"inputs": [{"events": {}}]})
