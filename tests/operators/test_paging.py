"""Paging through a listing visits every instance exactly once, whatever the page size and the
journal's size, through the HTTP API and through ``ledgerflow list``. On SQLite and PostgreSQL.

One journal per backend (built once for the module) holds instances started straight into the
store at the times 0, 1, 2, ... in tenants of chosen sizes, so a listing filtered by tenant,
or by ``created_until``, has exactly the size a test wants, around the page sizes that matter:
a page of the largest size (``limits.PAGE_SIZE_MAX``) followed by more.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import limits
from ledgerflow.cli.main import main
from ledgerflow.ledger.records import NewInstance
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId
from ledgerflow.operators.service import Operations
from ledgerflow.storage import open_store
from ledgerflow.web import create_app
from postgres_schema import postgres_url

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

MAX = limits.PAGE_SIZE_MAX
# Tenant "big" holds more than two pages of the largest size; the others, the sizes around
# one page of it (and a few small ones).
BIG = 2 * MAX + 1
SIZES = (1, 2, 3, MAX - 1, MAX, MAX + 1)
# Requests one example may make (a small page over a large listing is not drawn).
PAGES_PER_EXAMPLE_MAX = 12
# (page size, listing size): where a page can end early, always tried; hypothesis draws more.
EDGES = [(MAX, MAX + 1), (MAX, BIG), (MAX, MAX), (MAX, 2 * MAX), (MAX - 1, MAX), (1, 1), (2, 3)]
F = TypeVar("F", bound=Callable[..., None])


class Journal:
    """The module's journal. Not a dataclass: hypothesis prints a failing example's fixtures,
    a dataclass field by field (tens of kilobytes of ids, a warning, so an error here)."""

    def __init__(
        self, *, url: str, token: str, big: list[str], tenants: dict[str, set[str]]
    ) -> None:
        self.url = url
        self.token = token
        # Tenant "big"'s ids by creation time: instance n was created at time n.
        self.big = big
        # Every other tenant's ids, by tenant name.
        self.tenants = tenants

    def __repr__(self) -> str:
        return f"Journal({self.url!r})"


def _fill(url: str) -> Journal:
    store = open_store(url)
    big: list[str] = []
    tenants: dict[str, set[str]] = {}
    try:
        for tenant, size in [("big", BIG), *((f"t{n}", n) for n in SIZES)]:
            for n in range(size):
                new = NewInstance(
                    instance_id=InstanceId(f"wf_{tenant}_{n:05d}"),
                    tenant=TenantId(tenant),
                    workflow_name="order",
                    workflow_version=1,
                    fingerprint="fp",
                    business_key=BusinessKey(f"order-{n}"),
                    input="{}",
                )
                # Ties in time are broken by id: tenant t's instances share big's times.
                store.start_instance(new, now=float(n))
                if tenant == "big":
                    big.append(new.instance_id)
                else:
                    tenants.setdefault(tenant, set()).add(new.instance_id)
    finally:
        store.close()
    with Operations(url) as operations:
        token, _ = operations.tokens().create(
            name="root", role="admin", tenant="*", created_by="test"
        )
    return Journal(url=url, token=token, big=big, tenants=tenants)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def journal(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Journal:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('paging')}/journal.db"
    else:
        url = postgres_url(f"{__name__}-paging")
    return _fill(url)


@pytest.fixture(scope="module")
def client(journal: Journal) -> Iterator[TestClient]:
    headers = {"Authorization": f"Bearer {journal.token}"}
    with TestClient(create_app(journal.url), headers=headers) as client:
        yield client


def _check_pages(pages: list[tuple[list[str], str | None]], *, limit: int, size: int) -> None:
    """Every page but the last is full and names a cursor; the last names none; the pages
    hold ``size`` items."""
    assert len(pages) == max(1, math.ceil(size / limit))
    for items, cursor in pages[:-1]:
        assert (len(items), cursor is not None) == (limit, True)
    assert pages[-1][1] is None


def edges(*sizes: int) -> Callable[[F], F]:
    """The edges (of ``sizes``, if given): always tried."""

    def decorate(test: F) -> F:
        for limit, size in EDGES:
            if not sizes or size in sizes:
                test = example(limit=limit, size=size)(test)
        return test

    return decorate


SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(limit=st.integers(1, MAX), size=st.integers(0, BIG))
@edges()
def test_api_pages_visit_every_instance_once(
    journal: Journal, client: TestClient, limit: int, size: int
) -> None:
    """Goal: ``GET /v1/instances?limit=N`` pages end only when nothing remains, for every N
    up to ``PAGE_SIZE_MAX`` (a full page of 500 with more behind it used to end with
    ``next_cursor: null``).

    Method: a limit and a size (0..1001; the edges always, around a full page of 500); list tenant
    "big" created before ``size`` (exactly its ``size`` oldest), following ``next_cursor``:
    every instance of that set once, newest first, full pages until the last.
    """
    assume(size <= limit * PAGES_PER_EXAMPLE_MAX)
    pages: list[tuple[list[str], str | None]] = []
    cursor: str | None = None
    while len(pages) <= PAGES_PER_EXAMPLE_MAX:
        params: dict[str, str | int] = {"tenant": "big", "limit": limit, "created_until": size}
        if cursor:
            params["cursor"] = cursor
        answer = client.get("/v1/instances", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append(([i["instance_id"] for i in body["items"]], body["next_cursor"]))
        cursor = body["next_cursor"]
        if cursor is None:
            break
    seen = [i for items, _ in pages for i in items]
    assert seen == list(reversed(journal.big[:size]))
    _check_pages(pages, limit=limit, size=size)


def _ledgerflow(*args: str) -> int:
    """Run the real entry point with ``args``; its exit code (0 when it returns)."""
    argv = sys.argv
    sys.argv = ["ledgerflow", *args]
    try:
        main()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    finally:
        sys.argv = argv
    return 0


@SETTINGS
@given(limit=st.integers(1, MAX), size=st.sampled_from([*SIZES, BIG]))
@edges(*SIZES, BIG)
def test_cli_pages_visit_every_instance_once(
    journal: Journal, capsys: pytest.CaptureFixture[str], limit: int, size: int
) -> None:
    """Goal: ``ledgerflow list --limit N --cursor C`` pages the same way: the JSON names the
    next cursor while more remain, and following it visits every instance once.

    Method: a limit and one of the tenants (sizes 1, 2, 3, 499, 500, 501, 1001; the edges
    always); list it
    page by page through the real entry point: every id of the tenant once, full pages until
    the last, which names no cursor.
    """
    assume(size <= limit * PAGES_PER_EXAMPLE_MAX)
    tenants = {len(ids): tenant for tenant, ids in journal.tenants.items()} | {BIG: "big"}
    tenant = tenants[size]
    pages: list[tuple[list[str], str | None]] = []
    cursor: str | None = None
    while len(pages) <= PAGES_PER_EXAMPLE_MAX:
        args = ["--db", journal.url, "--tenant", tenant, "--limit", str(limit)]
        capsys.readouterr()
        code = _ledgerflow("list", *args, *(("--cursor", cursor) if cursor else ()), "--json")
        out = capsys.readouterr().out
        assert code == 0, out
        body = json.loads(out)
        pages.append(([i["instance_id"] for i in body["items"]], body["next_cursor"]))
        cursor = body["next_cursor"]
        if cursor is None:
            break
    seen = [i for items, _ in pages for i in items]
    expected = set(journal.big) if tenant == "big" else journal.tenants[tenant]
    assert len(seen) == len(set(seen)) == size
    assert set(seen) == expected
    _check_pages(pages, limit=limit, size=size)


def test_a_page_past_the_largest_size_is_refused(journal: Journal, client: TestClient) -> None:
    """Goal: the page size is bounded where it is read: the API refuses a limit past
    ``PAGE_SIZE_MAX`` (422), and so does ``ledgerflow list`` (a usage error)."""
    assert client.get("/v1/instances", params={"limit": MAX + 1}).status_code == 422
    assert _ledgerflow("list", "--db", journal.url, "--limit", str(MAX + 1)) == 2
