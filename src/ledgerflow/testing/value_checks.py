"""The oracle's checks of published values (internal: the oracle's ``check`` runs them on its
snapshot; a module of its own so that the oracle's stays within its length bound).

What the store shows a reader must be what the journal holds: each value row names a
completed ``publish:{name}`` position of the journal (its run and seq) whose input is the very
value shown -- a value never runs ahead of its step's commit, nor shows one the journal does
not hold -- and its version is the number of such positions in the instance's whole history
(each publication counted once: none lost to a crash, none doubled by a replay).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ledgerflow.ledger.records import StepRecord
from ledgerflow.ledger.values import PUBLISH_PREFIX, Published
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.step import StepKind, StepStatus
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
