"""One instance's recorded history as a versioned JSON document (internal; the format is
documented in ``docs/versioning.md``).

``ledgerflow export ID`` writes it; ``ledgerflow replay ... --histories DIR`` and
``ledgerflow.testing.replay_history`` read it back and replay it. The document holds the
instance row, its steps, its effects (with their idempotency keys, payloads and evidence), its
timeline and its inbox, each record with the ledger's own field names. A reader refuses a
document of another format or a newer format version instead of guessing.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import PayloadError
from ledgerflow.ledger.records import (
    Delivery,
    EffectRecord,
    InstanceRecord,
    Journal,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.model.ids import StepSeq
from ledgerflow.runtime.core import InstanceDetail
from ledgerflow.storage.rows import record_from_row

HISTORY_FORMAT = "ledgerflow.history"
HISTORY_FORMAT_VERSION = 1


def _plain(record: Any) -> dict[str, Any]:
    return {
        field.name: (value.value if isinstance(value, enum.Enum) else value)
        for field in dataclasses.fields(record)
        for value in (getattr(record, field.name),)
    }


_NO_PARENT = {
    "parent_instance_id": None,
    "parent_run": None,
    "parent_seq": None,
    "on_parent_end": None,
}


def history_document(detail: InstanceDetail) -> dict[str, Any]:
    """The history of one instance (its current run) as a JSON-ready document."""
    return {
        "format": HISTORY_FORMAT,
        "format_version": HISTORY_FORMAT_VERSION,
        "instance": _plain(detail.instance),
        "steps": [_plain(s) for s in detail.steps],
        "effects": [_plain(e) for e in detail.effects],
        "timeline": [_plain(t) for t in detail.timeline],
        "inbox": [_plain(d) for d in detail.inbox],
    }


def history_from_document(document: Any, *, source: str = "the document") -> InstanceDetail:
    """Read a history document back; :class:`PayloadError` names what is wrong with it."""
    if not isinstance(document, Mapping) or document.get("format") != HISTORY_FORMAT:
        raise PayloadError(f"{source} is not a Ledgerflow history (format {HISTORY_FORMAT!r})")
    version = document.get("format_version")
    if version != HISTORY_FORMAT_VERSION:
        raise PayloadError(
            f"{source} is history format version {version!r}; this Ledgerflow reads version "
            f"{HISTORY_FORMAT_VERSION}"
        )
    try:
        return InstanceDetail(
            # A history exported before child workflows (schema 0015) names no parent link.
            instance=record_from_row(InstanceRecord, {**_NO_PARENT, **document["instance"]}),
            steps=[record_from_row(StepRecord, s) for s in document["steps"]],
            effects=[record_from_row(EffectRecord, e) for e in document["effects"]],
            timeline=[record_from_row(TimelineEntry, t) for t in document.get("timeline", [])],
            inbox=[record_from_row(Delivery, d) for d in document.get("inbox", [])],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PayloadError(
            f"{source} is not a readable history: {type(exc).__name__}: {exc}"
        ) from None


def journal_of(detail: InstanceDetail) -> Journal:
    """The journal a replay reads: the history's steps and effects by position."""
    return Journal(
        steps={StepSeq(s.seq): s for s in detail.steps},
        effects={StepSeq(e.seq): e for e in detail.effects},
    )


def read_history(path: str | Path) -> InstanceDetail:
    """One exported history file."""
    file = Path(path)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"{file} cannot be read as JSON: {exc}") from None
    return history_from_document(document, source=str(file))


def read_histories(directory: str | Path) -> list[InstanceDetail]:
    """Every ``*.json`` history in a folder, by file name (at most REPLAY_HISTORIES_MAX)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise PayloadError(f"{folder} is not a folder of exported histories")
    files = sorted(folder.glob("*.json"))
    if len(files) > limits.REPLAY_HISTORIES_MAX:
        raise PayloadError(
            f"{folder} holds {len(files)} histories; one check reads at most "
            f"{limits.REPLAY_HISTORIES_MAX}"
        )
    return [read_history(f) for f in files]
