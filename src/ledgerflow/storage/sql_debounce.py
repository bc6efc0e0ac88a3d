"""The debounce part of a start, inside the start's transaction (internal).

A debounced start (:mod:`ledgerflow.model.debounce`) that finds its key's instance pending --
SCHEDULED by a debounced start, never claimed, not cancelled -- collapses into it: the row takes
the new input and the moved due time, and the timeline keeps a line for the start with the
input it replaced and when (by the database's clock on PostgreSQL, the one claims decide by);
who asked is in the audit record that a start through the operators' service writes in the
same transaction. The row is locked first, so a worker's claim and the collapse serialise on
it: either the collapse commits first (the claim then finds the instance not yet due, or due
with the new input), or the claim does (the collapse then finds it owned, and the key's rules
decide).
"""

from __future__ import annotations

import datetime

from ledgerflow.ledger.records import InstanceRecord, NewInstance
from ledgerflow.model.debounce import (
    DEBOUNCED,
    TIMELINE_SUBJECT,
    debounced_due,
    due_line,
    replaced_detail,
)
from ledgerflow.model.ids import Generation
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.storage.rows import instance_from_row
from ledgerflow.storage.sql_seam import SqlSeam


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds")


def pending_reason(due: float, latest: float, starts: int) -> str:
    """What a pending debounced instance shows: its deadline and the starts collapsed."""
    return (
        f"to start at {_when(due)} ({due:.3f}) unless a later start moves it (never past "
        f"{_when(latest)}); {starts - 1} later start(s) collapsed into it"
    )


def database_now(store: SqlSeam) -> float:
    rows, _ = store._run("database_now", {})
    return float(rows[0]["now"])


def opened(store: SqlSeam, new: NewInstance, generation: Generation, now: float) -> None:
    """The timeline line of the start that opens a window (a new instance or a new run)."""
    debounce = new.debounce
    assert debounce is not None
    due, latest = now + debounce.window_seconds, now + debounce.max_seconds
    detail = due_line("debounce window opened", due) + f", at the latest {_when(latest)}"
    store._timeline(new.instance_id, generation, TIMELINE_SUBJECT, None, "1", now, detail)


def collapse(store: SqlSeam, new: NewInstance, now: float) -> InstanceRecord | None:
    """Collapse a debounced start into its key's pending instance; None when there is none
    pending (it was claimed, began, ended, was cancelled or is no debounced start): the caller
    then decides by the key's rules. Whether a claim came first is the update's own condition
    (debounce_start), read under the row's lock."""
    debounce = new.debounce
    assert debounce is not None
    rows, _ = store._run("lock_instance", {"instance_id": new.instance_id})
    if not rows:
        return None
    record = instance_from_row(rows[0])
    if record.status is not InstanceStatus.SCHEDULED or record.reason_code != DEBOUNCED:
        return None
    if record.workflow_version != new.workflow_version:
        return None  # another version is another request: the key's rules refuse it
    window, _ = store._run("select_debounce_window", {"instance_id": new.instance_id})
    opened_at = float(window[0]["opened_at"]) if window[0]["opened_at"] is not None else now
    starts = int(window[0]["starts"] or 1) + 1
    due = debounced_due(debounce, now=now, opened_at=opened_at, starts=starts)
    latest = opened_at + debounce.max_seconds
    params = {
        "instance_id": new.instance_id,
        "run": record.run,
        "input": new.input,
        "available_at": due,
        "reason": pending_reason(due, latest, starts),
        "now": now,
    }
    changed, _ = store._run("debounce_start", params)
    if not changed:
        return None
    detail = replaced_detail(due_line(f"debounced start {starts}", due), record.input)
    store._timeline(
        new.instance_id, record.generation, TIMELINE_SUBJECT, str(starts - 1), str(starts),
        now, detail,
    )  # fmt: skip
    return instance_from_row(changed[0])
