"""The JSON every face prints: one shape per kind of output (internal).

The CLI's ``--json`` and the HTTP endpoint answer with these shapes, and ``docs/operators.md``
documents them:

- **A record** (instance, step, effect, event, delivery, flag, audit record, reconciliation
  run) is one JSON object of the record's fields: enums by value, and the fields that hold JSON
  text in the ledger (``input``, ``result``, ``output``, ``error``, ``evidence``, ``payload``,
  ``retry_policy``, ``plan``) as decoded JSON values, never as strings to decode again.
- **A listing** (``list``, ``attention``, ``audit``, ``reconcile --runs``) is one object,
  ``{"items": [record, ...]}``, with further top-level keys only for what a command adds
  (``attention --scan`` adds ``"scan"``); never a bare array, never JSON lines.
- **An instance with its ledgers** (``show``, ``GET /instances/ID``) is
  ``{"instance": ..., "steps": [...], "effects": [...], "events": [...], "inbox": [...]}``;
  over HTTP ``events`` and ``inbox`` are first pages (:func:`overview_json`), with the cursors
  of the next and the count of the events the inbox refused for being full; ``values`` are
  what it published (:func:`value_json`).
- **A page** (``GET /instances``, ``.../inbox``, ``.../timeline``, ``list``) is
  ``{"items": [...], "next_cursor": C}``; an inbox entry shows its payload only up to a bound
  (``payload_shown``), and its size (``payload_bytes``) always.
- **A delivered event** (``signal``, ``POST .../signals/NAME``) is ``{"outcome", "event_id",
  "instance_id", "name", "state", "reason"}``.
- **An error** is ``{"error": KIND, "code": "LFnnn", "message": TEXT}``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from ledgerflow.errors import LedgerflowError
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.inbox import InboxEntry
from ledgerflow.ledger.records import TimelineEntry
from ledgerflow.ledger.values import Published
from ledgerflow.operators.paging import InstanceOverview, Page
from ledgerflow.runtime.core import Delivered, InstanceDetail

T = TypeVar("T")
JSON_TEXT_FIELDS = frozenset(
    {"input", "result", "output", "error", "evidence", "payload", "retry_policy", "plan"}
)


def decoded(text: str | None) -> Any:
    """A ledger field's JSON text as a value; text that is not JSON is shown as stored (the
    ledger is the evidence: nothing is hidden)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def record_json(record: Any) -> dict[str, Any]:
    """A ledger record (a dataclass) as a JSON object."""
    out: dict[str, Any] = {}
    for item in dataclasses.fields(record):
        value = getattr(record, item.name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif item.name in JSON_TEXT_FIELDS and isinstance(value, str):
            value = decoded(value)
        out[item.name] = value
    return out


def listing(items: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A listing's one object: the items, and what the command adds."""
    return {"items": items, **extra}


def page_json(page: Page[T], item: Callable[[T], dict[str, Any]]) -> dict[str, Any]:
    """A page of a listing: its items (each shaped by ``item``) and the next page's cursor."""
    return {"items": [item(i) for i in page.items], "next_cursor": page.next_cursor}


def timeline_json(entry: TimelineEntry) -> dict[str, Any]:
    """A timeline entry as published: ``show --json`` and ``GET /instances/ID`` list the
    timeline under ``events``, each entry numbered ``event_id``. Those outward names predate
    the timeline's own (``entry_id``) and scripts read them, so they stay as they are."""
    out = record_json(entry)
    return {"event_id": out.pop("entry_id"), **out}


def detail_json(detail: InstanceDetail) -> dict[str, Any]:
    """An instance with its step and effect ledgers, timeline and inbox."""
    return {
        "instance": record_json(detail.instance),
        "steps": [record_json(s) for s in detail.steps],
        "effects": [record_json(e) for e in detail.effects],
        "events": [timeline_json(e) for e in detail.timeline],
        "inbox": [record_json(d) for d in detail.inbox],
        "runs": [record_json(r) for r in detail.runs],
        "children": [record_json(c) for c in detail.children],
        "values": [value_json(v) for v in detail.values],
    }


def value_json(value: Published) -> dict[str, Any]:
    """A published value (``ctx.publish``): its name, the value decoded, its version, and the
    run and position that published it, when (``GET .../values/NAME``, ``show``)."""
    return {
        "name": value.name,
        "value": decoded(value.value_text),
        "version": value.version,
        "run": value.run,
        "seq": value.seq,
        "published_at": value.published_at,
    }


def inbox_entry_json(entry: InboxEntry) -> dict[str, Any]:
    """An event of an inbox page: its payload decoded when it was small enough to show."""
    return {**record_json(entry), "payload_shown": entry.payload is not None}


def overview_json(page: InstanceOverview) -> dict[str, Any]:
    """An instance's page over HTTP: its ledgers, the first page of its timeline (``events``)
    and of its inbox with the cursors of the next, its inbox's refusals and its children
    (its parent is on the instance)."""
    refusals = page.inbox_refusals
    return {
        "instance": record_json(page.instance),
        "steps": [record_json(s) for s in page.steps],
        "effects": [record_json(e) for e in page.effects],
        "events": [timeline_json(e) for e in page.timeline.items],
        "events_next_cursor": page.timeline.next_cursor,
        "inbox": [inbox_entry_json(e) for e in page.inbox.items],
        "inbox_next_cursor": page.inbox.next_cursor,
        "inbox_refused": record_json(refusals) if refusals is not None else None,
        "runs": [record_json(r) for r in page.runs],
        "children": [record_json(c) for c in page.children],
        "values": [value_json(v) for v in page.values],
    }


def error_json(error: LedgerflowError) -> dict[str, Any]:
    """An error: its kind (from the class name, ``instance_not_found``), code and message."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__.removesuffix("Error")).lower()
    # The code has its own field; the message keeps the identities the text names.
    message = str(error).removeprefix(f"[{error.code}] ")
    return {"error": kind, "code": error.code, "message": message}


def refused(delivered: Delivered) -> bool:
    """Whether the event changed nothing and never will (also for a repeat of a refused one)."""
    return delivered.delivery.state is DeliveryState.REJECTED


def delivery_json(delivered: Delivered) -> dict[str, Any]:
    """What the endpoint and ``ledgerflow signal --json`` answer for a delivery."""
    delivery = delivered.delivery
    return {
        "outcome": delivered.outcome.value,
        "event_id": delivery.event_id,
        "instance_id": delivery.instance_id,
        "name": delivery.name,
        "state": delivery.state,
        # The store keeps "" for an accepted event; callers get one way to say "no reason".
        "reason": delivery.reason or None,
    }
