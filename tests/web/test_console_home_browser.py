"""The console's home page in a real browser (Debian's Chromium, driven by Playwright,
against ``ledgerflow serve`` over a real SQLite journal): the signals, the counts by status
linking to the filtered list, and the activity chart; kept as ``docs/console/home.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from perimeter_world import build, drain, registry

from browser import artifacts, browser_context, chromium, keep_for_docs, sign_in
from ledgerflow.operators.service import Operations

pytestmark = pytest.mark.slow


def test_the_home_page_shows_counts_signals_and_activity(processes: Any, tmp_path: Path) -> None:
    """Goal: signed in, an operator lands on a page that says at a glance how many instances
    are where, what is in doubt, and what the last day looked like.

    Method: the perimeter journal and eight more acme orders, five of them shipped (they
    succeed); sign in as olga: the home page shows 1 open UNKNOWN and 1 parked, the counts
    (SUCCEEDED 5), a chart whose bars are drawn; clicking SUCCEEDED opens the list filtered
    on it, five rows.
    """
    chromium()
    world = build(processes.db_url)
    with Operations(processes.db_url, registry=registry) as operations:
        orders = [
            operations.start("pay", key=f"order-{n}", input={"amount": n}, tenant="acme")
            for n in range(10, 18)
        ]
    drain(processes.db_url)
    with Operations(processes.db_url) as operations:
        for order in orders[:5]:
            operations.signal(order.instance_id, "shipped", event_id="s", payload=None,
                              actor="test")  # fmt: skip
    drain(processes.db_url)
    url, _ = processes.server()
    shots = artifacts()
    with browser_context(tmp_path / "olga") as context:
        page = context.new_page()
        sign_in(page, url, world.tokens["olga"])
        assert page.url == f"{url}/console"
        assert "1 open UNKNOWN outcome" in page.locator("#signal-unknown").inner_text()
        assert page.locator("#signal-parked strong").inner_text() == "1"
        assert page.locator("#activity-chart rect.seg").count() >= 2
        page.screenshot(path=shots / "home.png", full_page=True)
        page.locator("#statuses a", has_text="SUCCEEDED").click()
        page.wait_for_url(f"{url}/console/instances?status=SUCCEEDED")
        assert page.locator("tbody tr").count() == 5
    keep_for_docs(shots, ["home.png"])
