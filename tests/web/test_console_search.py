"""The console's instance search: business key, status, workflow, version, reason, a time
range and, for a principal of every tenant, the tenant; keyset pages whose "Older" link keeps
the filters. On SQLite and PostgreSQL, in-process over a real journal."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from console_client import signed_in
from listing_world import start_instances
from perimeter_world import build

from ledgerflow import limits

PAGE = limits.PAGE_SIZE_DEFAULT
ROW = '<tr class="status-'


def _older(page: str) -> str | None:
    found = re.search(r'id="older" href="([^"]+)"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def test_a_filtered_listing_pages_with_its_filters(journal_url: str) -> None:
    """Goal: every page of a filtered listing holds only what the filters choose, and the
    "Older" link carries the filters with the cursor (keyset paging).

    Method: 60 ``bulk-`` orders of acme v2 at t=1000..1059, and others beside them (another
    key, another version, another workflow); list key ``bulk-``, workflow order, version 2,
    status RUNNING: 50 rows, the newest first; the Older link keeps the four filters; its
    page holds the 10 oldest and no link.
    """
    bulk = [(f"bulk-{n:02d}", "acme", "order", 2, 1000.0 + n) for n in range(60)]
    others = [("bulk-v1", "acme", "order", 1, 1001.5), ("bulk-ship", "acme", "ship", 2, 1002.5),
              ("other-1", "acme", "order", 2, 1003.5)]  # fmt: skip
    start_instances(journal_url, *bulk, *others)
    with signed_in(journal_url) as client:
        first = client.get(
            "/console/instances?key_prefix=bulk-&workflow=order&version=2&status=RUNNING"
        ).text
        assert first.count(ROW) == PAGE
        keys = re.findall(r'<td class="key">([^<]+)</td>', first)
        assert keys == [f"bulk-{n:02d}" for n in range(59, 9, -1)]
        link = _older(first)
        assert link is not None
        carried = parse_qs(urlsplit(link).query)
        assert {k: v[0] for k, v in carried.items() if k != "cursor"} == {
            "key_prefix": "bulk-", "workflow": "order", "version": "2", "status": "RUNNING",
        }  # fmt: skip
        rest = client.get(link).text
        keys = re.findall(r'<td class="key">([^<]+)</td>', rest)
        assert keys == [f"bulk-{n:02d}" for n in range(9, -1, -1)]
        assert _older(rest) is None


def test_a_time_range_and_the_tenant_filter(journal_url: str) -> None:
    """Goal: a created-from/until range (UTC, the until excluded) chooses the instances
    started in it; the tenant filter is offered to a principal of every tenant only, and
    another's listing stays its own tenant's whatever the URL says; a time that is not one
    is a 422 saying what it should look like.

    Method: acme at t=1000..1019 and globex at t=1005; from 00:16:45 to 00:16:50 UTC (1005
    to 1010): 6 rows for root (5 acme, 1 globex), and root with tenant=globex: 1. An acme
    admin-less operator's form has no tenant field and tenant=globex still lists acme's.
    """
    start_instances(journal_url, *[(f"a-{n}", "acme", "order", 1, 1000.0 + n) for n in range(20)],
           ("g-1", "globex", "order", 1, 1005.0))  # fmt: skip
    window = "created_from=1970-01-01T00:16:45&created_until=1970-01-01T00:16:50"
    with signed_in(journal_url) as client:
        page = client.get(f"/console/instances?{window}").text
        assert page.count(ROW) == 6
        assert 'name="tenant"' in page
        assert client.get(f"/console/instances?{window}&tenant=globex").text.count(ROW) == 1
        wrong = client.get("/console/instances?created_from=yesterday")
        assert wrong.status_code == 422
        assert "must be a time such as 2026-12-02T06:30 (UTC)" in wrong.text
    with signed_in(journal_url, role="operator", tenant="acme") as client:
        page = client.get(f"/console/instances?{window}&tenant=globex").text
        assert 'name="tenant"' not in page
        assert page.count(ROW) == 5
        assert "g-1" not in page


def test_the_reason_filter_finds_the_parked(journal_url: str) -> None:
    """Goal: an operator finds the instances parked for one reason; the form offers the
    reasons the journal's parked instances have.

    Method: the perimeter journal (one instance parked for effect_outcome_unknown, two
    waiting): reason=effect_outcome_unknown lists the parked one only; the datalist offers
    that reason; a reason nobody has lists nothing. The API's listing takes the same filter
    (``reason_code``).
    """
    world = build(journal_url)
    with signed_in(journal_url) as client:
        page = client.get("/console/instances?reason=effect_outcome_unknown").text
        assert page.count(ROW) == 1
        assert world.parked in page
        assert '<option value="effect_outcome_unknown">' in page
        assert client.get("/console/instances?reason=nothing_like_it").text.count(ROW) == 0
        listed = client.get(
            "/v1/instances?reason_code=effect_outcome_unknown",
            headers={"Authorization": f"Bearer {world.tokens['root']}"},
        )
        assert [i["instance_id"] for i in listed.json()["items"]] == [world.parked]
