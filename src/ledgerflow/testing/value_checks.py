"""The oracle's checks of published values (internal: the oracle's ``check`` runs them on its
snapshot; a module of its own so that the oracle's stays within its length bound).

What the store shows a reader must be what the journal holds: each value row names a
completed ``publish:{name}`` position of the journal (its run and seq) whose input is the very
value shown -- a value never runs ahead of its step's commit, nor shows one the journal does
not hold -- and its version is the number of such positions in the instance's whole history
(each publication counted once: none lost to a crash, none doubled by a replay).

And every update request is applied once and answered once (:func:`updates_answered_once`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import Delivery, InstanceRecord, StepRecord
from ledgerflow.ledger.values import PUBLISH_PREFIX, Published
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.signal import UPDATE_PREFIX
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.testing.run_checks import is_take, taken_event
from ledgerflow.testing.violations import Violation

WITH_ITS_STEP = "value-published-with-its-step"
ONE_VERSION_PER_PUBLICATION = "value-one-version-per-publication"


def values_published_with_their_steps(
    values: Mapping[InstanceId, Sequence[Published]],
    steps: Mapping[InstanceId, Sequence[StepRecord]],
) -> Iterable[Violation]:
    """Every published value checked against its instance's journal (see module)."""
    for iid in set(values) | set(steps):
        markers: dict[tuple[int, int], StepRecord] = {
            (int(s.run), int(s.seq)): s
            for s in steps.get(iid, ())
            if s.kind is StepKind.MARKER
            and s.name.startswith(PUBLISH_PREFIX)
            and s.status is StepStatus.COMPLETED
        }
        publications = Counter(s.name[len(PUBLISH_PREFIX) :] for s in markers.values())
        shown = {value.name: value for value in values.get(iid, ())}
        for name, value in shown.items():
            at = markers.get((value.run, value.seq))
            if at is None or at.name != PUBLISH_PREFIX + name or at.input != value.value_text:
                yield Violation(
                    WITH_ITS_STEP,
                    iid,
                    f"{name!r} version {value.version} shows {value.value_text} from run "
                    f"{value.run} step {value.seq}, which the journal does not publish",
                )
            if value.version != publications[name]:
                yield Violation(
                    ONE_VERSION_PER_PUBLICATION,
                    iid,
                    f"{name!r} is at version {value.version}; the journal publishes it "
                    f"{publications[name]} times",
                )
        for name in publications.keys() - shown.keys():
            yield Violation(
                ONE_VERSION_PER_PUBLICATION,
                iid,
                f"the journal publishes {name!r} {publications[name]} times; no value is shown",
            )


APPLIED_ONCE = "update-applied-once"
ANSWERED_ONCE = "update-answered-once"


def updates_answered_once(
    instances: Sequence[InstanceRecord],
    inbox: Mapping[InstanceId, Sequence[Delivery]],
    steps: Mapping[InstanceId, Sequence[StepRecord]],
) -> Iterable[Violation]:
    """Every update request the inbox accepted is applied once and answered once: a request
    taken is taken at one journal position (a ``take:`` marker under a wait, or a wait of
    ``handle_updates``), never twice, and -- once its code ended it -- has exactly one reply
    published (``publish:update:{id}``); a refused one has neither."""
    # Ended by the code's own doing: a parked or cancelled instance may stop inside a handler.
    ended = {
        i.instance_id
        for i in instances
        if i.status in TERMINAL_STATUSES
        and i.status not in (InstanceStatus.MANUAL_INTERVENTION, InstanceStatus.CANCELLED)
    }
    for iid, deliveries in inbox.items():
        taken: Counter[str] = Counter()
        replies: Counter[str] = Counter()
        for s in steps.get(iid, ()):
            if s.status is not StepStatus.COMPLETED:
                continue
            if is_take(s) or (s.kind is StepKind.WAIT and s.name.startswith("wait:update:")):
                taken[str(taken_event(s))] += 1
            elif s.kind is StepKind.MARKER and s.name.startswith(PUBLISH_PREFIX + UPDATE_PREFIX):
                replies[s.name[len(PUBLISH_PREFIX) :]] += 1
        for d in deliveries:
            if not d.name.startswith(UPDATE_PREFIX):
                continue
            consumed = d.state is DeliveryState.CONSUMED
            if taken[d.event_id] != (1 if consumed else 0):
                yield Violation(
                    APPLIED_ONCE,
                    iid,
                    f"update {d.event_id} ({d.state.value}) was taken {taken[d.event_id]} times",
                )
            if (consumed and iid in ended) or d.state is DeliveryState.REJECTED:
                expected = 1 if consumed else 0
                if replies[d.event_id] != expected:
                    yield Violation(
                        ANSWERED_ONCE,
                        iid,
                        f"update {d.event_id} ({d.state.value}) has {replies[d.event_id]} "
                        f"replies, not {expected}",
                    )
