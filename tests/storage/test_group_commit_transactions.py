"""The store thread's group commit carries transactions of several instances as it carries
one owner's commits: queued together, one durable transaction, a refused one rolled back
alone with every write it held for another instance."""

from __future__ import annotations

import asyncio
import dataclasses

from ledger_records import W2, claimed, commit_of, new, step, step_write
from ledgerflow.errors import FencedOutError
from ledgerflow.ledger.records import StartInstance
from ledgerflow.ledger.transaction import Transaction
from ledgerflow.model.step import StepStatus
from ledgerflow.runtime.store_thread import AsyncStore
from ledgerflow.storage.store import Store


def test_transactions_ride_one_group_commit(store: Store) -> None:
    parents = [claimed(store, f"parent-{n}") for n in range(6)]
    stale = dataclasses.replace(parents[3], generation=parents[3].generation + 1)  # type: ignore[operator]
    units = [
        Transaction(
            commits=(
                commit_of(
                    parent if n != 3 else stale,
                    step_write(step(parent, 1, StepStatus.STARTED), StepStatus.NEW),
                    owner=None if n != 3 else W2,
                ),
            ),
            writes=(StartInstance(new=new(f"parent-{n}/1", workflow="child")),),
        )
        for n, parent in enumerate(parents)
    ]
    thread = AsyncStore(store)

    async def commit_all() -> list[Exception | None]:
        return await asyncio.gather(*(thread.commit(unit, now=2.0) for unit in units))

    try:
        groups_before = thread.groups
        results = asyncio.run(commit_all())
        groups = thread.groups - groups_before
    finally:
        thread.stop()
    assert [type(r).__name__ for r in results] == ["NoneType"] * 3 + ["FencedOutError"] + [
        "NoneType"
    ] * 2
    assert isinstance(results[3], FencedOutError)
    # Fewer transactions than units: they were grouped.
    assert groups < len(units)
    for n, parent in enumerate(parents):
        child = store.get_instance(new(f"parent-{n}/1", workflow="child").instance_id)
        steps = store.journal(parent.instance_id, parent.run).steps
        if n == 3:
            assert child is None
            assert steps == {}
        else:
            assert child is not None
            assert steps[1].status is StepStatus.STARTED
