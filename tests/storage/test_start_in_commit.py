"""A commit may start another instance (``StartInstance``): the typed write child workflows
will use, so that a parent's step and its child's instance are one transaction. On both
backends: both land, or, when the commit is fenced out or the child's key started something
else, neither."""

from __future__ import annotations

import dataclasses

from ledger_records import W2, claimed, commit_of, commit_one, new, step, step_write
from ledgerflow.errors import ConcurrencyError, FencedOutError
from ledgerflow.ledger.records import StartInstance
from ledgerflow.model.step import StepStatus
from ledgerflow.storage.store import Store


def test_a_commit_starts_another_instance_with_its_own_writes(store: Store) -> None:
    parent = claimed(store, "parent")
    child = new("child", workflow="shipping")
    started = step(parent, 1, StepStatus.STARTED)
    assert (
        commit_one(
            store,
            commit_of(parent, step_write(started, StepStatus.NEW), StartInstance(new=child)),
        )
        is None
    )
    found = store.get_instance(child.instance_id)
    assert found is not None
    assert (found.workflow_name, found.business_key) == ("shipping", "child")
    assert store.journal(parent.instance_id, parent.run).steps[1].status is StepStatus.STARTED
    # The same start again (a replay's, say) keeps the child as it is.
    again = step(parent, 2, StepStatus.STARTED)
    assert (
        commit_one(
            store, commit_of(parent, step_write(again, StepStatus.NEW), StartInstance(new=child))
        )
        is None
    )
    assert [i.business_key for i in store.list_instances(limit=10)].count("child") == 1


def test_a_fenced_out_commit_starts_nothing(store: Store) -> None:
    parent = claimed(store, "parent")
    stale = dataclasses.replace(parent, generation=parent.generation + 1)  # type: ignore[operator]
    child = new("orphan", workflow="shipping")
    refused = commit_one(
        store,
        commit_of(stale, step_write(step(stale, 1, StepStatus.STARTED), StepStatus.NEW),
                  StartInstance(new=child), owner=W2),
    )  # fmt: skip
    assert isinstance(refused, FencedOutError)
    assert store.get_instance(child.instance_id) is None
    assert store.journal(parent.instance_id, parent.run).steps == {}


def test_a_key_that_started_something_else_refuses_the_whole_commit(store: Store) -> None:
    parent = claimed(store, "parent")
    held = new("held", workflow="shipping")
    store.start_instance(held, now=0.0)
    other = dataclasses.replace(held, input='{"another": "input"}')
    refused = commit_one(
        store,
        commit_of(parent, step_write(step(parent, 1, StepStatus.STARTED), StepStatus.NEW),
                  StartInstance(new=other)),
    )  # fmt: skip
    assert isinstance(refused, ConcurrencyError)
    assert store.journal(parent.instance_id, parent.run).steps == {}
    kept = store.get_instance(held.instance_id)
    assert kept is not None
    assert kept.input == held.input
