"""A state machine as data: the allowed-transition table is the single source of truth.

Each ledger (instances, steps, effects) declares its table of (state, event) -> state with
:class:`Machine`. Every write names its event: the runtime and the operators compute the target
state from the table (:meth:`Machine.check`), and the store checks each write again against the
table (:meth:`Machine.check_write`) before it touches a row, so an illegal transition is refused
wherever it would come from. Changing the protocol means changing a table; every caller of a
transition is found by its event's name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from ledgerflow.errors import IllegalTransitionError

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


@dataclass(frozen=True, slots=True)
class Machine(Generic[S, E]):
    """A table from (state, event) to the next state. Anything not in it is refused."""

    name: str
    table: Mapping[tuple[S, E], S]
    terminal: frozenset[S]
    # Events only an audited operator repair may cause: a worker's write along one of these
    # edges is refused by the store (see check_write).
    operator_only: frozenset[E] = frozenset()

    def allows(self, state: S, event: E) -> bool:
        return (state, event) in self.table

    def check(self, state: S, event: E) -> S:
        """The next state, or :class:`IllegalTransitionError` naming both ends."""
        try:
            return self.table[(state, event)]
        except KeyError:
            raise IllegalTransitionError(
                machine=self.name, state=state.value, event=event.value
            ) from None

    def targets(self, state: S) -> frozenset[S]:
        """Every state reachable from ``state`` in one allowed transition."""
        return frozenset(t for (s, _), t in self.table.items() if s == state)

    def check_write(self, state: S, event: E, target: S, *, by_operator: bool = False) -> None:
        """Refuse a write that does not move ``state`` to ``target`` by ``event`` as the table
        says, or that uses an operator-only event outside an audited repair."""
        if event in self.operator_only and not by_operator:
            raise IllegalTransitionError(
                f"{self.name}: {event.value} is an operator's repair, not a worker's write",
                machine=self.name,
                state=state.value,
                event=event.value,
            )
        if self.check(state, event) is not target:
            raise IllegalTransitionError(
                f"{self.name}: {event.value} takes {state.value} to "
                f"{self.table[(state, event)].value}, not {target.value}",
                machine=self.name,
                state=state.value,
                event=event.value,
            )

    def event_to(self, state: S, target: S) -> E:
        """The one event that takes ``state`` to ``target``: for a person who names the state
        an instance should reach (a forced ending). Refused when no event, or several, do."""
        events = [e for (s, e), t in self.table.items() if s == state and t == target]
        if len(events) != 1:
            raise IllegalTransitionError(
                f"{self.name}: {len(events)} transitions from {state.value} to {target.value}",
                machine=self.name,
                state=state.value,
                event=target.value,
            )
        return events[0]

    def is_terminal(self, state: S) -> bool:
        return state in self.terminal

    def edges(self) -> list[tuple[S, E, S]]:
        """Every allowed transition, for documentation and exhaustive tests."""
        return [(s, e, t) for (s, e), t in self.table.items()]
