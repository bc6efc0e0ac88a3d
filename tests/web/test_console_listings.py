"""The console's listings end where the ledger does: the audit log's "Older" link only when
older records exist, and the attention page says when more wait than it shows. On SQLite and
PostgreSQL, in-process over a real journal."""

from __future__ import annotations

from console_client import signed_in

from ledgerflow import limits
from ledgerflow.ledger.audit import AuditEntry
from ledgerflow.ledger.records import NewInstance
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId
from ledgerflow.storage import open_store

PAGE = limits.PAGE_SIZE_DEFAULT


def _audit(url: str, count: int) -> None:
    store = open_store(url)
    try:
        for n in range(count):
            entry = AuditEntry(
                actor="test", role=None, kind="start", instance_id=None, target=f"t-{n}",
                fingerprint=f"fp-{n}", outcome="applied", reason=f"record {n}", evidence=None,
                plan="{}",
            )  # fmt: skip
            store.append_audit(entry, now=1000.0 + n)
    finally:
        store.close()


def _flagged(url: str, count: int, *, first: int = 0) -> None:
    store = open_store(url)
    try:
        for n in range(first, first + count):
            new = NewInstance(
                instance_id=InstanceId(f"wf_flagged_{n:04d}"), tenant=TenantId("acme"),
                workflow_name="order", workflow_version=1, fingerprint="fp",
                business_key=BusinessKey(f"order-{n}"), input="{}",
            )  # fmt: skip
            store.start_instance(new, now=float(n))
            store.raise_flag(
                instance_id=new.instance_id, reason_code="stuck_step", evidence="quiet",
                detected_by="test", now=float(n),
            )  # fmt: skip
    finally:
        store.close()


def test_the_audit_page_links_older_records_only_when_there_are_some(journal_url: str) -> None:
    """Goal: a page of exactly PAGE_SIZE_DEFAULT records with nothing older has no "Older"
    link (it used to link to an empty page); with one record more, the link leads to it.

    Method: signing in appends one record (the token's creation); append PAGE - 1 more: the
    page lists PAGE records and no link; append one more: the link is there, and the page it
    leads to holds the one oldest record and no link.
    """
    with signed_in(journal_url) as client:
        _audit(journal_url, PAGE - 1)
        page = client.get("/console/audit")
        assert page.status_code == 200
        assert page.text.count("<tr><td>") == PAGE
        assert "before_id=" not in page.text
        _audit(journal_url, 1)
        page = client.get("/console/audit")
        assert page.text.count("<tr><td>") == PAGE
        older = page.text.split('href="/console/audit?before_id=')[1].split('"')[0]
        rest = client.get(f"/console/audit?before_id={older}")
        assert rest.text.count("<tr><td>") == 1
        assert "token-create" in rest.text
        assert "before_id=" not in rest.text


def test_the_attention_page_says_when_more_wait_than_it_shows(journal_url: str) -> None:
    """Goal: the attention page holds at most PAGE_SIZE_MAX items and says so when more wait
    (it used to cut the queue silently).

    Method: PAGE_SIZE_MAX flagged instances: all listed, no notice; one more: still
    PAGE_SIZE_MAX rows, the oldest ones, and the notice.
    """
    with signed_in(journal_url) as client:
        _flagged(journal_url, limits.PAGE_SIZE_MAX)
        page = client.get("/console/attention")
        assert page.text.count('<tr class="status-') == limits.PAGE_SIZE_MAX
        assert "More items wait" not in page.text
        _flagged(journal_url, 1, first=limits.PAGE_SIZE_MAX)
        page = client.get("/console/attention")
        assert page.text.count('<tr class="status-') == limits.PAGE_SIZE_MAX
        assert "More items wait" in page.text
        assert f"wf_flagged_{limits.PAGE_SIZE_MAX:04d}" not in page.text
