"""The instance search in a real browser (Debian's Chromium, driven by Playwright, against
``ledgerflow serve`` over a real SQLite journal): the filters are a form, and paging keeps
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from listing_world import start_instances
from perimeter_world import build

from browser import browser_context, chromium, sign_in
from ledgerflow import limits

pytestmark = pytest.mark.slow
PAGE = limits.PAGE_SIZE_DEFAULT


def test_an_operator_filters_and_pages_in_the_browser(processes: Any, tmp_path: Path) -> None:
    """Goal: the search form filters the list, and "Older" shows the next page of the same
    search with the form still filled in.

    Method: the perimeter journal and 55 acme ``bulk-`` orders; as olga type ``bulk-`` and
    choose RUNNING: a page of 50, every key starting ``bulk-``; click Older: 5 more, the
    key field still ``bulk-`` and the status still RUNNING. Then the reason field set to
    effect_outcome_unknown lists the one parked instance.
    """
    chromium()
    world = build(processes.db_url)
    start_instances(processes.db_url, *[(f"bulk-{n:02d}", "acme", "order", 1, 1000.0 + n)
                               for n in range(PAGE + 5)])  # fmt: skip
    url, _ = processes.server()
    with browser_context(tmp_path / "olga") as context:
        page = context.new_page()
        sign_in(page, url, world.tokens["olga"])
        page.goto(f"{url}/console/instances")
        form = page.locator("#filters")
        assert form.locator("input[name=tenant]").count() == 0
        form.locator("input[name=key_prefix]").fill("bulk-")
        form.locator("select[name=status]").select_option("RUNNING")
        form.locator("button").click()
        keys = page.locator("tbody td.key").all_inner_texts()
        assert len(keys) == PAGE
        assert all(k.startswith("bulk-") for k in keys)
        page.click("#older")
        keys = page.locator("tbody td.key").all_inner_texts()
        assert keys == [f"bulk-{n:02d}" for n in range(4, -1, -1)]
        assert form.locator("input[name=key_prefix]").input_value() == "bulk-"
        assert form.locator("select[name=status]").input_value() == "RUNNING"
        page.click("#clear-filters")
        form.locator("input[name=reason]").fill("effect_outcome_unknown")
        form.locator("button").click()
        rows = page.locator("tbody tr")
        assert rows.count() == 1
        assert world.parked in rows.first.inner_text()
