"""One transaction around many store calls (``store.transaction()``), on both backends: the
calls inside commit together or not at all, each call is still all or nothing on its own, a
block nests as a savepoint, and nothing of an open transaction is seen from another
connection before it commits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger_records import new
from ledgerflow.errors import ConcurrencyError
from ledgerflow.ledger.access import ApiToken
from ledgerflow.ledger.audit import AuditEntry, AuditQuery
from ledgerflow.model.ids import InstanceId
from ledgerflow.storage import open_store
from ledgerflow.storage.store import Store

NOW = 1_000.0


class AbandonedError(Exception):
    """What a caller raises to give a transaction up."""


def _entry(instance_id: str, outcome: str = "applied") -> AuditEntry:
    return AuditEntry(
        actor="alice",
        role=None,
        kind="start",
        instance_id=InstanceId(instance_id),
        target=None,
        fingerprint=f"fp-{instance_id}-{outcome}",
        outcome=outcome,
        reason="test",
        evidence=None,
        plan="{}",
    )


def _audited(store: Store, instance_id: str) -> list[str]:
    records = store.audit_records(AuditQuery(instance_id=InstanceId(instance_id), limit=50))
    return [r.outcome for r in records]


@pytest.fixture
def other(journal_url: str, store: Store) -> Iterator[Store]:
    """A second store on the same journal: another connection, as another process has."""
    opened = open_store(journal_url)
    try:
        yield opened
    finally:
        opened.close()


def test_calls_inside_commit_together(store: Store, other: Store) -> None:
    first = new("k-1")
    with store.transaction():
        record, created = store.start_instance(first, now=NOW)
        store.append_audit(_entry(record.instance_id), now=NOW)
        # Inside, the transaction reads what it wrote; outside, nothing is there yet.
        assert store.get_instance(first.instance_id) is not None
        assert _audited(store, first.instance_id) == ["applied"]
        assert other.get_instance(first.instance_id) is None
    assert created
    assert other.get_instance(first.instance_id) is not None
    assert _audited(other, first.instance_id) == ["applied"]


def test_an_error_out_of_the_block_leaves_nothing(store: Store) -> None:
    doomed = new("k-2")

    def abandoned() -> None:
        with store.transaction():
            store.start_instance(doomed, now=NOW)
            store.append_audit(_entry(doomed.instance_id), now=NOW)
            raise AbandonedError

    with pytest.raises(AbandonedError):
        abandoned()
    assert store.get_instance(doomed.instance_id) is None
    assert _audited(store, doomed.instance_id) == []
    # The store is usable afterwards: the next transaction commits.
    with store.transaction():
        store.start_instance(doomed, now=NOW)
    assert store.get_instance(doomed.instance_id) is not None


def test_a_refused_call_inside_leaves_nothing_of_itself_and_the_rest_goes_on(
    store: Store,
) -> None:
    kept = new("k-3")

    def nested_abandoned() -> None:
        with store.transaction():
            store.append_audit(_entry(kept.instance_id, outcome="no-op"), now=NOW)
            raise AbandonedError

    with store.transaction():
        store.start_instance(kept, now=NOW)
        # A nested block that fails rolls back to its savepoint only.
        with pytest.raises(AbandonedError):
            nested_abandoned()
        store.append_audit(_entry(kept.instance_id), now=NOW)
    assert store.get_instance(kept.instance_id) is not None
    assert _audited(store, kept.instance_id) == ["applied"]


def _token(token_id: str, name: str) -> ApiToken:
    return ApiToken(
        token_id=token_id,
        name=name,
        role="viewer",
        tenant="acme",
        secret_hash="0" * 64,
        created_at=NOW,
        created_by="test",
    )


def test_a_store_error_inside_rolls_back_its_call_only(store: Store) -> None:
    """A statement the database refuses (here a second token under a used id) fails its call;
    the transaction goes on and commits what else it holds (PostgreSQL would abort the whole
    transaction were the call not in a savepoint of its own)."""
    kept = new("k-4")
    with store.transaction():
        store.start_instance(kept, now=NOW)
        assert store.insert_token(_token("t-1", "olga")) is None
        with pytest.raises(ConcurrencyError):
            store.insert_token(_token("t-1", "pavel"))
        store.append_audit(_entry(kept.instance_id), now=NOW)
    assert store.get_instance(kept.instance_id) is not None
    assert [t.name for t in store.tokens()] == ["olga"]
    assert _audited(store, kept.instance_id) == ["applied"]
