"""Oracle checks of a parent's ending against its children (see :mod:`ledgerflow.testing.oracle`).

A parent's final ending reaches its live children by their declared policy; ``wait`` promises
that the ending comes after theirs, whoever writes it (the worker after a success, a failure
and its compensation, a cancellation, or an operator's repair).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ledgerflow.ledger.records import InstanceRecord, TimelineEntry
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import FINAL_STATUSES, TERMINAL_STATUSES
from ledgerflow.testing.violations import Violation

_FINAL = {s.value for s in FINAL_STATUSES}
_ENDED = {s.value for s in TERMINAL_STATUSES}


class _Snapshot(Protocol):
    """What this check reads of the oracle's snapshot (``oracle.Snapshot``)."""

    @property
    def instances(self) -> list[InstanceRecord]: ...
    @property
    def events(self) -> dict[InstanceId, list[TimelineEntry]]: ...


def _first_entry(entries: Iterable[TimelineEntry], states: set[str]) -> TimelineEntry | None:
    return next((e for e in entries if e.subject == "instance" and e.to_state in states), None)


def no_parent_ends_before_its_wait_children(snapshot: _Snapshot) -> list[Violation]:
    """A parent in a final status has no child started with ``on_parent_end="wait"`` that is
    live, or that ended after it. Entries are compared by their store-given numbers: a child's
    ending commits before its parent can take it, so an ending that waited is numbered later;
    one that did not wait may race its child's, which this check then misses, never invents."""
    found: list[Violation] = []
    by_id = {i.instance_id: i for i in snapshot.instances}
    for child in snapshot.instances:
        parent = by_id.get(InstanceId(child.parent_instance_id or ""))
        if child.on_parent_end != "wait" or parent is None or parent.status not in FINAL_STATUSES:
            continue
        parent_end = _first_entry(snapshot.events.get(parent.instance_id, []), _FINAL)
        child_end = _first_entry(snapshot.events.get(child.instance_id, []), _ENDED)
        if child_end is None:
            found.append(
                Violation(
                    "no-parent-ends-before-its-wait-children",
                    parent.instance_id,
                    f"ended {parent.status.value} while its wait child {child.instance_id} is "
                    f"{child.status.value}",
                )
            )
        elif parent_end is not None and parent_end.entry_id < child_end.entry_id:
            found.append(
                Violation(
                    "no-parent-ends-before-its-wait-children",
                    parent.instance_id,
                    f"ended {parent.status.value} (entry {parent_end.entry_id}) before its wait "
                    f"child {child.instance_id} ended {child_end.to_state} "
                    f"(entry {child_end.entry_id})",
                )
            )
    return found
