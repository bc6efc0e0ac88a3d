"""The oracle's checks of debounced starts (internal: the oracle runs them on its snapshot;
``ledgerflow.testing.start_sweep`` with what each caller saw).

A debounce window is the run of ``debounce`` lines on an instance's timeline from the start
that opened it (model/debounce.py); its run begins at the first claim after the opening.

- ``debounce-ran-stale-input``: no start collapsed into the window after its run was claimed
  (that caller was told its input was taken, and the run read another), and, where the
  caller knows what the run's code received (``seen``), it is the input of the last start
  collapsed before the claim;
- ``debounce-early``: the run was claimed no earlier than the due time the last start before
  the claim set (its moved time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ledgerflow.ledger.records import InstanceRecord, TimelineEntry
from ledgerflow.model.debounce import TIMELINE_SUBJECT, due_of, replaced_input
from ledgerflow.model.ids import InstanceId
from ledgerflow.testing.violations import Violation

STALE_INPUT = "debounce-ran-stale-input"
EARLY = "debounce-early"


def _claim(entry: TimelineEntry) -> bool:
    return entry.subject == "owner" and entry.detail == "claimed"


def debounce_held(
    instances: Sequence[InstanceRecord],
    events: Mapping[InstanceId, Sequence[TimelineEntry]],
    seen: Mapping[InstanceId, str] | None = None,
) -> Iterable[Violation]:
    """The two promises above for the newest window of every instance that has one
    (``seen``: the input, as JSON text, each run's code received, where a test knows it)."""
    for instance in instances:
        iid = instance.instance_id
        timeline = list(events.get(iid, ()))
        openings = [
            i
            for i, e in enumerate(timeline)
            if e.subject == TIMELINE_SUBJECT and e.from_state is None
        ]
        if not openings:
            continue
        window = timeline[openings[-1] :]
        claim = next((i for i, e in enumerate(window) if _claim(e)), None)
        if claim is None:
            continue  # still pending: nothing began
        before = [e for e in window[:claim] if e.subject == TIMELINE_SUBJECT]
        after = [e for e in window[claim:] if e.subject == TIMELINE_SUBJECT]
        for late in after[:1]:
            yield Violation(
                STALE_INPUT,
                iid,
                f"a start collapsed at {late.at} ({late.detail}) after the run was claimed at "
                f"{window[claim].at}",
            )
        due = due_of(before[-1].detail) if before else None
        if due is not None and window[claim].at < due:
            yield Violation(
                EARLY, iid, f"claimed at {window[claim].at}, before its moved time {due}"
            )
        if seen is not None and iid in seen:
            # What the row held at the claim: the input the first late start replaced, or
            # (none came late) the row's input now.
            expected = replaced_input(after[0].detail) if after else instance.input
            if seen[iid] != expected:
                yield Violation(
                    STALE_INPUT,
                    iid,
                    f"the run received {seen[iid]}, the last start before it began gave {expected}",
                )
