"""A state machine as data: the allowed-transition table is the single source of truth.

Each ledger (instances, steps, effects) declares its table with :class:`Machine`; the runtime
asks :meth:`Machine.check` before every write and the storage layer asks again after every read,
so an illegal transition is refused wherever it would come from.
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
    # edges is refused by the store (see check_edge).
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

    def check_edge(self, state: S, target: S, *, by_operator: bool = False) -> None:
        """Refuse a write that moves ``state`` to ``target`` by no allowed transition (for a
        worker's write, by no transition other than an operator-only one)."""
        allowed = {
            t
            for (s, e), t in self.table.items()
            if s == state and (by_operator or e not in self.operator_only)
        }
        if target not in allowed:
            raise IllegalTransitionError(
                f"{self.name}: no transition from {state.value} to {target.value}",
                machine=self.name,
                state=state.value,
                event=target.value,
            )

    def is_terminal(self, state: S) -> bool:
        return state in self.terminal

    def edges(self) -> list[tuple[S, E, S]]:
        """Every allowed transition, for documentation and exhaustive tests."""
        return [(s, e, t) for (s, e), t in self.table.items()]
