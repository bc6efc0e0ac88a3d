"""A store whose connection drops now and then: the explorer's "connections dropped" fault.

Wraps a real store. A dropped commit or claim raises
:class:`~ledgerflow.errors.StorageUnavailableError`, half the time before the call reached the
database (nothing happened) and half the time after it was applied (it happened, its answer was
lost): the worst case for an engine, which must neither build on a write it cannot see nor
repeat one it cannot see. Draws come from the run's seeded generator, so a seed replays.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, cast

from ledgerflow.errors import StorageUnavailableError
from ledgerflow.ledger.records import Commit, InstanceRecord
from ledgerflow.ledger.transaction import Transaction
from ledgerflow.model.ids import WorkerId
from ledgerflow.storage.store import Store


class DroppingStore:
    """Example::

    store = dropping(open_store(url), random.Random(seed), rate=0.01)
    engine = Engine(store, registry)
    """

    def __init__(self, store: Store, rng: random.Random, rate: float) -> None:
        self._store = store
        self._rng = rng
        self._rate = rate
        self.dropped: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _draw(self) -> str | None:
        draw = self._rng.random()
        if draw < self._rate / 2:
            return "before"
        if draw < self._rate:
            return "after"
        return None

    def _drop(self, call: str, when: str) -> None:
        self.dropped.append(f"{call} {when}")
        raise StorageUnavailableError(f"scripted: the connection dropped {when} the {call}")

    def commit(
        self, commits: Sequence[Commit | Transaction], *, now: float
    ) -> list[Exception | None]:
        when = self._draw()
        if when == "before":
            self._drop("commit", when)
        answer = self._store.commit(commits, now=now)
        if when == "after":
            self._drop("commit", when)
        return answer

    def claim(self, *, owner: WorkerId, **kwargs: Any) -> list[InstanceRecord]:
        when = self._draw()
        if when == "before":
            self._drop("claim", when)
        claimed = self._store.claim(owner=owner, **kwargs)
        if when == "after":
            self._drop("claim", when)
        return claimed


def dropping(store: Store, rng: random.Random, rate: float) -> Store:
    """``store`` with its connection dropping at ``rate`` per commit or claim."""
    return cast(Store, DroppingStore(store, rng, rate))
