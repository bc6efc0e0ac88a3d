"""Listings a page at a time: keyset cursors, and the look-ahead row that says whether another
page follows; an instance with its inbox and timeline a page at a time (internal).

Every paged listing (instances; an instance's inbox and timeline) reads one row more than the
page holds: that row, when it exists, is the proof that another page follows, and the page's
last item is where the next one starts. The store's own bound on a page read is therefore
``limits.PAGE_READ_MAX`` (the largest page and its look-ahead row), never the page size
itself: a store that cut the look-ahead row off would end a full page of the largest size
with no cursor, and a client paging through would silently miss the rest.

A cursor is opaque to clients: the position of the page's last item (a JSON array, base64url).
It is read back only through :func:`decode_cursor`, which checks its shape and each value
against what the listing's positions can be (a finite number, a 64-bit integer, printable
text of bounded length), so a forged or cut cursor is
:class:`~ledgerflow.errors.InvalidCursorError` (422), never a query the journal cannot run.

An instance's page (:class:`InstanceOverview`, ``GET /v1/instances/ID`` and the console's) holds
its step and effect ledgers, the first page of its inbox and of its timeline with the cursors
of the next, and what its inbox refused for being full: small whatever a signaller sent it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from ledgerflow import limits
from ledgerflow.errors import InvalidCursorError
from ledgerflow.ledger.access import InstanceQuery
from ledgerflow.ledger.inbox import InboxEntry, InboxRefusals
from ledgerflow.ledger.records import (
    EffectRecord,
    InstanceRecord,
    RunRecord,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.ledger.values import Published
from ledgerflow.model.names import refused_character
from ledgerflow.storage.store import OperatorStore, Store

__all__ = [
    "InstanceOverview",
    "InstancePage",
    "Page",
    "decode_cursor",
    "encode_cursor",
    "overview",
    "page_inbox",
    "page_instances",
    "page_of",
    "page_size",
    "page_timeline",
]

T = TypeVar("T")
Position = float | int | str
# Text in a position (an instance id, an event id) is never longer than this.
_POSITION_TEXT_MAX = 1000


# Not slotted: a slotted generic dataclass cannot be made through its alias (InstancePage).
@dataclass(frozen=True, kw_only=True)
class Page(Generic[T]):
    """One page of a listing and the cursor of the next (None: this was the last)."""

    items: list[T]
    next_cursor: str | None


InstancePage = Page[InstanceRecord]


def page_size(limit: int) -> int:
    """A requested page size, within 1..``limits.PAGE_SIZE_MAX``."""
    return max(1, min(limit, limits.PAGE_SIZE_MAX))


def page_of(
    found: Sequence[T], *, limit: int, position: Callable[[T], Sequence[Position]]
) -> Page[T]:
    """The page in ``found`` (read with ``limit + 1`` rows): its first ``limit`` items, and a
    cursor at the last of them when the look-ahead row exists."""
    items = list(found[:limit])
    more = len(found) > limit
    return Page(items=items, next_cursor=encode_cursor(*position(items[-1])) if more else None)


def encode_cursor(*position: Position) -> str:
    """An opaque cursor naming ``position`` (the last item of a page)."""
    text = json.dumps(list(position), ensure_ascii=True)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: Sequence[type[Position]]) -> tuple[Position, ...]:
    """The position a cursor names, one value per kind in ``kinds`` (``float``, ``int`` or
    ``str``), or :class:`InvalidCursorError` for one this API did not give."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidCursorError("the cursor is not one this API gave") from None
    if not isinstance(values, list) or len(values) != len(kinds):
        raise InvalidCursorError("the cursor is not one this API gave")
    return tuple(_checked(value, kind) for value, kind in zip(values, kinds, strict=True))


def _checked(value: object, kind: type[Position]) -> Position:
    if isinstance(value, bool):  # an int to Python, never a position
        raise InvalidCursorError("the cursor is not one this API gave")
    if kind is float and isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if kind is int and isinstance(value, int) and 0 <= value <= limits.REQUEST_INTEGER_MAX:
        return value
    # A lone surrogate or a NUL would reach the journal's query and fail there.
    if kind is str and isinstance(value, str) and _printable(value):
        return value
    raise InvalidCursorError("the cursor is not one this API gave")


def _printable(text: str) -> bool:
    return len(text) <= _POSITION_TEXT_MAX and not any(refused_character(c) for c in text)


def page_instances(store: Store, query: InstanceQuery, *, cursor: str | None) -> InstancePage:
    """Instances matching ``query``, newest first, a page of ``query.limit`` at a time
    (``cursor``: where the previous page ended)."""
    limit = page_size(query.limit)
    after = None
    if cursor:
        at, instance_id = decode_cursor(cursor, (float, str))
        after = (float(at), str(instance_id))
    found = store.page_instances(replace(query, after=after, limit=limit + 1))
    return page_of(found, limit=limit, position=lambda r: (r.created_at, r.instance_id))


def page_inbox(
    store: OperatorStore, record: InstanceRecord, *, cursor: str | None, limit: int
) -> Page[InboxEntry]:
    """A page of an instance's inbox, oldest first (``cursor``: where the previous ended)."""
    limit = page_size(limit)
    after = None
    if cursor:
        at, event_id = decode_cursor(cursor, (float, str))
        after = (float(at), str(event_id))
    found = store.inbox_page(record.instance_id, after=after, limit=limit + 1)
    return page_of(found, limit=limit, position=lambda e: (e.received_at, e.event_id))


def page_timeline(
    store: OperatorStore, record: InstanceRecord, *, cursor: str | None, limit: int
) -> Page[TimelineEntry]:
    """A page of an instance's timeline, oldest first (``cursor``: where the previous ended)."""
    limit = page_size(limit)
    after = int(decode_cursor(cursor, (int,))[0]) if cursor else None
    found = store.timeline_page(record.instance_id, after=after, limit=limit + 1)
    return page_of(found, limit=limit, position=lambda e: (e.entry_id,))


@dataclass(frozen=True, kw_only=True)
class InstanceOverview:
    """An instance's page: its ledgers, a page of its inbox and of its timeline."""

    instance: InstanceRecord
    steps: list[StepRecord]
    effects: list[EffectRecord]
    inbox: Page[InboxEntry]
    timeline: Page[TimelineEntry]
    inbox_refusals: InboxRefusals | None
    # The latest runs it closed by continuing as new (limits.RUNS_SHOWN_MAX), oldest first.
    runs: list[RunRecord] = field(default_factory=list)
    # The child workflows it started, oldest first (its parent is on the instance record).
    children: list[InstanceRecord] = field(default_factory=list)
    # What it published (ctx.publish, update replies), by name.
    values: list[Published] = field(default_factory=list)


def overview(
    store: OperatorStore,
    record: InstanceRecord,
    *,
    inbox_cursor: str | None = None,
    timeline_cursor: str | None = None,
) -> InstanceOverview:
    """``record``'s page: the first pages of its inbox and timeline (or those the cursors
    name), ``limits.PAGE_SIZE_DEFAULT`` entries each."""
    journal = store.journal(record.instance_id, record.run)
    size = limits.PAGE_SIZE_DEFAULT
    return InstanceOverview(
        instance=record,
        steps=[journal.steps[s] for s in sorted(journal.steps)],
        effects=[journal.effects[s] for s in sorted(journal.effects)],
        inbox=page_inbox(store, record, cursor=inbox_cursor, limit=size),
        timeline=page_timeline(store, record, cursor=timeline_cursor, limit=size),
        inbox_refusals=store.inbox_refusals(record.instance_id),
        runs=store.runs(record.instance_id, latest=limits.RUNS_SHOWN_MAX),
        children=store.children(record.instance_id, limit=size),
        values=store.published_values(record.instance_id),
    )
