"""An instance's inbox is bounded: past ``INBOX_EVENTS_MAX`` events or ``INBOX_BYTES_MAX``
payload bytes that no wait has taken, an event is refused (``InboxFullError``, LF112) by the
engine and by ``ledgerflow signal``, not kept, and counted. On SQLite and PostgreSQL, with the
real bounds (nobody runs the instances: every event stays pending)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from ledgerflow import Registry, SyncEngine, WorkflowContext, limits
from ledgerflow.cli.main import main
from ledgerflow.errors import InboxFullError
from ledgerflow.model.ids import InstanceId
from ledgerflow.storage import open_store

registry = Registry()


@registry.workflow(name="deaf", version=1)
async def deaf(ctx: WorkflowContext, _: None) -> None:
    await ctx.wait_for("the-one-it-waits-for")


@pytest.fixture
def engine(journal_url: str) -> Iterator[SyncEngine]:
    with SyncEngine(journal_url, registry) as engine:
        yield engine


def test_past_the_event_count_an_event_is_refused_and_counted_not_kept(
    engine: SyncEngine, journal_url: str
) -> None:
    """Goal: a signaller cannot grow an instance without bound by the number of events.

    Method: INBOX_EVENTS_MAX small signals nobody waits for are kept; the next one raises
    InboxFullError naming the instance and the event, and is not in the inbox; a repeat of a
    kept event still answers as a repeat; a second refusal adds to the count, which keeps the
    first and the latest refusal and no payload.
    """
    instance_id = engine.start("deaf", key="flooded").instance_id
    for n in range(limits.INBOX_EVENTS_MAX):
        engine.signal(instance_id, "noise", event_id=f"e-{n}", payload=n, sender="spam")
    with pytest.raises(InboxFullError) as refused:
        engine.signal(instance_id, "noise", event_id="one-too-many", payload=1, sender="spam")
    assert (refused.value.instance_id, refused.value.event_id) == (instance_id, "one-too-many")
    assert refused.value.code == "LF112"
    again = engine.signal(instance_id, "noise", event_id="e-0", payload=0, sender="spam")
    assert again.outcome.value == "duplicate"
    with pytest.raises(InboxFullError):
        engine.signal(instance_id, "noise", event_id="and-another", payload=2, sender="spam")
    store = open_store(journal_url)
    try:
        inbox = store.inbox(InstanceId(instance_id))
        counted = store.inbox_refusals(InstanceId(instance_id))
    finally:
        store.close()
    assert len(inbox) == limits.INBOX_EVENTS_MAX
    assert {"one-too-many", "and-another"}.isdisjoint(d.event_id for d in inbox)
    assert counted is not None
    assert (counted.refused, counted.last_event_id, counted.last_sender) == (
        2,
        "and-another",
        "spam",
    )
    assert counted.first_at <= counted.last_at


def test_past_the_payload_bytes_an_event_is_refused(engine: SyncEngine, journal_url: str) -> None:
    """Goal: nor by the size of what they carry: the inbox's payloads stay within
    INBOX_BYTES_MAX, and an event that fits is still kept after a refused larger one.

    Method: 900 KB signals until the next would pass the bound: each kept; the next raises
    InboxFullError; a small one that fits is kept; the inbox's payloads are within the bound.
    """
    instance_id = engine.start("deaf", key="heavy").instance_id
    blob = "x" * 900_000
    fitting = limits.INBOX_BYTES_MAX // (len(blob) + 2)
    for n in range(fitting):
        engine.signal(instance_id, "blob", event_id=f"b-{n}", payload=blob)
    with pytest.raises(InboxFullError):
        engine.signal(instance_id, "blob", event_id="too-heavy", payload=blob)
    engine.signal(instance_id, "note", event_id="light", payload="fits")
    store = open_store(journal_url)
    try:
        inbox = store.inbox(InstanceId(instance_id))
    finally:
        store.close()
    assert [d.event_id for d in inbox] == [*(f"b-{n}" for n in range(fitting)), "light"]
    assert sum(len(d.payload.encode()) for d in inbox) <= limits.INBOX_BYTES_MAX


def test_the_command_line_refuses_in_one_line(
    engine: SyncEngine, journal_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Goal: ``ledgerflow signal`` past the bound is a one-line error with the code, exit 1.

    Method: fill an inbox by bytes through the engine; the command's next signal exits 1 with
    one line on stderr naming LF112.
    """
    instance_id = engine.start("deaf", key="cli").instance_id
    blob = "y" * 900_000
    for n in range(limits.INBOX_BYTES_MAX // (len(blob) + 2)):
        engine.signal(instance_id, "blob", event_id=f"b-{n}", payload=blob)
    capsys.readouterr()
    argv = sys.argv
    sys.argv = ["ledgerflow", "signal", instance_id, "blob", "--event-id", "cli-1",
                "--payload", f'"{blob}"', "--db", journal_url]  # fmt: skip
    try:
        with pytest.raises(SystemExit) as exit_:
            main()
    finally:
        sys.argv = argv
    err = capsys.readouterr().err
    assert exit_.value.code == 1
    assert err.count("\n") == 1
    assert "[LF112]" in err
