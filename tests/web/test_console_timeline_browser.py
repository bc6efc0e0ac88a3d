"""The instance's visual timeline in a real browser (Debian's Chromium, driven by Playwright,
against ``ledgerflow serve`` over a real SQLite journal): bars for the steps, effects, the
timer and the compensation, the UNKNOWN outcome and the retry marked; the page is kept as a
screenshot (``docs/console/instance-timeline.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from timeline_world import build

from browser import artifacts, browser_context, chromium, keep_for_docs, sign_in

pytestmark = pytest.mark.slow


def test_the_instance_page_draws_its_timeline(processes: Any, tmp_path: Path) -> None:
    """Goal: an operator sees an instance's history as bars on a time axis, with the UNKNOWN
    outcome and the retry marked, drawn by the server (the page runs no script).

    Method: the parked trip (reserve, a price step retried once, a timer, a charge whose
    outcome is UNKNOWN): its chart has the instance's lane and four more, one bar per
    position plus the instance's statuses, one UNKNOWN mark and one retry mark, and it fits
    the page's width. The compensated trip's chart has a compensation bar. The parked page
    is saved as instance-timeline.png.
    """
    chromium()
    trips = build(processes.db_url)
    url, _ = processes.server()
    shots = artifacts()
    with browser_context(tmp_path / "root") as context:
        page = context.new_page()
        sign_in(page, url, trips.token)
        page.goto(f"{url}/console/instances/{trips.parked}")
        chart = page.locator("#timeline-chart svg")
        assert chart.is_visible()
        labels = chart.locator("text.lane-label").all_text_contents()
        assert labels == ["instance", "1 shop.reserve", "2 price", "3 sleep", "4 shop.charge"]
        assert chart.locator("rect.kind-effect").count() == 2
        assert chart.locator("rect.kind-local").count() == 1
        assert chart.locator("rect.kind-timer").count() == 1
        assert chart.locator(".mark-unknown").count() == 1
        assert chart.locator(".mark-retry").count() == 1
        box = chart.bounding_box()
        assert box is not None
        assert box["width"] <= 1400
        assert page.evaluate("document.scripts.length") == 0
        page.screenshot(path=shots / "instance-timeline.png", full_page=True)
        page.goto(f"{url}/console/instances/{trips.compensated}")
        compensation = page.locator("#timeline-chart rect.kind-compensation")
        assert compensation.count() == 1
        assert "-1 shop.release" in page.locator("#timeline-chart").inner_text()
    keep_for_docs(shots, ["instance-timeline.png"])
