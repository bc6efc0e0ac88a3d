"""Instances written straight into a journal for the listing tests: any tenant, workflow,
version and start time, no worker needed."""

from __future__ import annotations

from ledgerflow.ledger.records import NewInstance
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId
from ledgerflow.storage import open_store


def start_instances(url: str, *keys: tuple[str, str, str, int, float]) -> None:
    """Instances as (key, tenant, workflow, version, created at)."""
    store = open_store(url)
    try:
        for n, (key, tenant, workflow, version, at) in enumerate(keys):
            new = NewInstance(
                instance_id=InstanceId(f"wf_search_{n:04d}"), tenant=TenantId(tenant),
                workflow_name=workflow, workflow_version=version, fingerprint="fp",
                business_key=BusinessKey(key), input="{}",
            )  # fmt: skip
            store.start_instance(new, now=at)
    finally:
        store.close()
