"""The operators' service as a principal sees it: filtered, keyset-paged listings, versions,
and the workers extension point. On SQLite and PostgreSQL.

Instances are started straight into the journal (no workflow runs: only their rows matter);
flags are raised through the detection part of the store, as a scan would.
"""

from __future__ import annotations

import pytest

from ledgerflow.errors import InvalidCursorError
from ledgerflow.ledger.records import NewInstance
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId
from ledgerflow.operators.service import (
    ALL_TENANTS,
    ApiRole,
    InstanceQuery,
    Operations,
    Principal,
)
from ledgerflow.storage import open_store

ADMIN = Principal(name="root", role=ApiRole.ADMIN, tenant=ALL_TENANTS)


def _fill(url: str) -> list[str]:
    """Seven instances: acme's order-0..4 (order-1 on version 2, order-3 flagged) at times
    10..14, and globex's g-0, g-1 at 10 and 11; returns acme's ids oldest first."""
    store = open_store(url)
    ids: list[str] = []
    try:
        for n in range(5):
            new = NewInstance(
                instance_id=InstanceId(f"wf_acme_{n}"),
                tenant=TenantId("acme"),
                workflow_name="order",
                workflow_version=2 if n == 1 else 1,
                fingerprint="fp2" if n == 1 else "fp1",
                business_key=BusinessKey(f"order-{n}"),
                input="{}",
            )
            store.start_instance(new, now=10.0 + n)
            ids.append(new.instance_id)
        for n in range(2):
            store.start_instance(
                NewInstance(
                    instance_id=InstanceId(f"wf_globex_{n}"),
                    tenant=TenantId("globex"),
                    workflow_name="order",
                    workflow_version=1,
                    fingerprint="fp1",
                    business_key=BusinessKey(f"g-{n}"),
                    input="{}",
                ),
                now=10.0 + n,
            )
        store.raise_flag(
            instance_id=InstanceId(ids[3]),
            reason_code="stuck_step",
            evidence="quiet",
            detected_by="test",
            now=20.0,
        )
    finally:
        store.close()
    return ids


def test_filters_and_keyset_pages(journal_url: str) -> None:
    """Goal: every filter narrows the listing in both dialects, pages follow one another
    without gap or repeat, newest first, and a scoped principal never sees another tenant.

    Method: fill the journal; as acme's viewer, page through with limit 2 (three pages, the
    five ids newest first); filter by version, key prefix, flagged yes/no, a time range; as
    an admin of every tenant ask for globex; a made-up cursor is refused.
    """
    ids = _fill(journal_url)
    viewer = Principal(name="v", role=ApiRole.VIEWER, tenant="acme")
    with Operations(journal_url) as operations:
        scoped = operations.acting_as(viewer)
        seen: list[str] = []
        cursor = None
        for _ in range(5):
            page = scoped.page(InstanceQuery(limit=2), cursor=cursor)
            seen += [r.instance_id for r in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == list(reversed(ids))

        def found(**filters: object) -> list[str]:
            items = scoped.page(InstanceQuery(**filters)).items
            return sorted(r.instance_id for r in items)

        assert found(workflow_version=2) == [ids[1]]
        assert found(key_prefix="order-") == sorted(ids)
        assert found(key_prefix="order-4") == [ids[4]]
        assert found(flagged=True) == [ids[3]]
        assert found(flagged=False) == sorted(set(ids) - {ids[3]})
        assert found(created_from=11.0, created_until=13.0) == [ids[1], ids[2]]
        assert found(tenant="globex") == []
        assert found(status="SUCCEEDED") == []
        everyone = operations.acting_as(ADMIN).page(InstanceQuery(tenant="globex")).items
        assert sorted(r.instance_id for r in everyone) == ["wf_globex_0", "wf_globex_1"]
        with pytest.raises(InvalidCursorError):
            scoped.page(InstanceQuery(), cursor="not-a-cursor")


def test_versions_count_what_the_journal_holds_and_workers_are_not_guessed(
    journal_url: str,
) -> None:
    """Goal: the versions page counts instances per workflow, version, fingerprint and status
    of the principal's tenant; the workers come from the worker registry, not from a guess
    over leases.

    Method: fill the journal; acme's counts are order v1/fp1 x4 and v2/fp2 x1, all RUNNING;
    an admin of every tenant counts globex's two as well; no worker ever registered, so
    workers() is empty.
    """
    _fill(journal_url)
    acme = Principal(name="v", role=ApiRole.VIEWER, tenant="acme")
    with Operations(journal_url) as operations:
        counts = operations.acting_as(acme).versions()
        assert [(c.workflow_version, c.fingerprint, c.status, c.instances) for c in counts] == [
            (2, "fp2", "RUNNING", 1),
            (1, "fp1", "RUNNING", 4),
        ]
        total = sum(c.instances for c in operations.acting_as(ADMIN).versions())
        assert total == 7
        assert operations.acting_as(acme).workers() == []


def test_the_asynchronous_service_scopes_alike(journal_url: str) -> None:
    """Goal: code on an engine (asyncio) gets the same scoped answers as the synchronous
    service: another tenant's instances stay out of sight.

    Method: fill the journal; through an Engine's AsyncOperations, acme's viewer pages the
    listing (acme's five only) and reads globex's instance: not found.
    """
    import asyncio

    from ledgerflow import Engine, Registry
    from ledgerflow.errors import InstanceNotFoundError
    from ledgerflow.operators.async_service import AsyncOperations

    ids = _fill(journal_url)
    viewer = Principal(name="v", role=ApiRole.VIEWER, tenant="acme")

    async def run() -> None:
        async with Engine(journal_url, Registry()) as engine:
            operations = AsyncOperations(engine)
            page = await operations.as_principal(viewer, lambda ops: ops.page(InstanceQuery()))
            assert sorted(r.instance_id for r in page.items) == sorted(ids)
            with pytest.raises(InstanceNotFoundError):
                await operations.as_principal(viewer, lambda ops: ops.get("wf_globex_0"))

    asyncio.run(run())
