"""The approval in a real browser (Debian's Chromium, driven by Playwright, against
``ledgerflow serve`` over a real SQLite journal): an approver opens the waiting instance,
approves it with the form, a worker finishes it and the page shows the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from approval_world import build

from browser import artifacts, browser_context, chromium, sign_in
from conditions import WAIT_SECONDS_MAX

pytestmark = pytest.mark.slow


def test_an_approver_approves_in_the_browser_and_sees_the_result(
    processes: Any, tmp_path: Path
) -> None:
    """Goal: a human-approval workflow can be approved from the console, and the page shows
    its input and, once done, its result.

    Method: sign in as alice; open the refund waiting for her approval: the page names the
    wait, and offers Approve (no Cancel or repair form: alice signals, she does not
    operate); click Approve: the page says the inbox holds the event; a worker process runs
    to idle; after a reload the instance is SUCCEEDED and the result names alice.
    """
    chromium()
    world = build(processes.db_url)
    url, _ = processes.server()
    with browser_context(tmp_path / "alice") as context:
        page = context.new_page()
        sign_in(page, url, world.tokens["alice"])
        page.goto(f"{url}/console/instances/{world.refund}")
        assert "refund" in page.locator("#waiting").inner_text()
        assert page.locator("#cancel-form").count() == 0
        assert page.locator("#repair-form").count() == 0
        assert "none recorded yet" in page.locator("#result").inner_text()
        page.locator("#signal-form input[name=payload]").fill('{"approved": true}')
        page.locator("#signal-form button").click()
        page.wait_for_url(f"{url}/console/instances/{world.refund}?sent=*")
        assert "the inbox holds it PENDING" in page.locator("#delivered").inner_text()
        page.screenshot(path=artifacts() / "approved.png", full_page=True)
        worker = processes.worker(until_idle=True)
        assert worker.wait(timeout=WAIT_SECONDS_MAX) == 0
        page.reload()
        assert "SUCCEEDED" in page.locator("h1").inner_text()
        result = page.locator("#result").inner_text()
        assert '"by": "alice"' in result
        assert page.locator("#signal-form").count() == 0
