"""The oracle's checks of the programming model's capabilities (runs, children, locks, values,
heartbeats, flow control, debounced starts, ...), gathered in one place so
:mod:`ledgerflow.testing.oracle` calls them in one line; each lives in its own module beside
this one."""

from __future__ import annotations

from typing import Protocol

from ledgerflow.ledger.locks import LockRecord
from ledgerflow.ledger.values import Published
from ledgerflow.model.flow import Admission
from ledgerflow.model.ids import InstanceId
from ledgerflow.testing.child_checks import no_parent_ends_before_its_wait_children
from ledgerflow.testing.child_compensation_checks import compensated_child_once
from ledgerflow.testing.debounce_checks import debounce_held
from ledgerflow.testing.flow_checks import flows_held
from ledgerflow.testing.heartbeat_checks import heartbeats_and_attempts
from ledgerflow.testing.lock_checks import locks_held_rightly
from ledgerflow.testing.run_checks import Snapshot as RunSnapshot
from ledgerflow.testing.run_checks import (
    no_event_lost_or_duplicated_across_a_switch,
    one_open_run,
)
from ledgerflow.testing.value_checks import (
    updates_answered_once,
    values_published_with_their_steps,
)
from ledgerflow.testing.violations import Violation


class Snapshot(RunSnapshot, Protocol):
    """What these checks read of the oracle's snapshot (``oracle.Snapshot``)."""

    @property
    def locks(self) -> list[LockRecord]: ...
    @property
    def values(self) -> dict[InstanceId, list[Published]]: ...
    @property
    def flow(self) -> list[Admission]: ...


def capability_checks(snapshot: Snapshot) -> list[Violation]:
    return [
        *one_open_run(snapshot),
        *no_event_lost_or_duplicated_across_a_switch(snapshot),
        *no_parent_ends_before_its_wait_children(snapshot),
        *compensated_child_once(snapshot.instances, snapshot.steps),
        *locks_held_rightly(snapshot.locks),
        *values_published_with_their_steps(snapshot.values, snapshot.steps),
        *updates_answered_once(snapshot.instances, snapshot.inbox, snapshot.steps),
        *heartbeats_and_attempts(
            snapshot.instances, snapshot.effects, snapshot.events, snapshot.steps
        ),
        *flows_held(snapshot.flow),
        *debounce_held(snapshot.instances, snapshot.events),
    ]
