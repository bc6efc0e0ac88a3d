"""Every console page fits its window (Debian's Chromium, driven by Playwright, against
``ledgerflow serve`` over a real SQLite journal): at 1,400 and at 800 px wide no page is
wider than the viewport (``document.documentElement.scrollWidth``), however long a business
key, an idempotency key or a reason is, and the nav bar spans the page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from perimeter_world import World, build, drain, registry

from browser import artifacts, browser_context, chromium, keep_for_docs, sign_in
from ledgerflow.operators.service import Operations

pytestmark = pytest.mark.slow

# A business key of the longest kind people paste: one word, no place to break it.
LONG_KEY = "order-" + "9" * 250


def _world(url: str) -> tuple[World, str]:
    world = build(url)
    with Operations(url, registry=registry) as operations:
        long = operations.start("pay", key=LONG_KEY, input={"amount": 3, "lose": True})
    drain(url)
    return world, long.instance_id


def _pages(world: World, long: str) -> list[str]:
    return [
        "/console",
        "/console/instances",
        f"/console/instances?key_prefix={LONG_KEY[:40]}",
        "/console/attention",
        "/console/audit",
        "/console/versions",
        "/console/locks",
        "/console/schedules",
        f"/console/instances/{world.parked}",
        f"/console/instances/{world.waiting}",
        f"/console/instances/{long}",
        "/console/instances/wf_nobody",
    ]


@pytest.mark.parametrize("width", [1400, 800])
def test_no_console_page_is_wider_than_the_window(
    processes: Any, tmp_path: Path, width: int
) -> None:
    """Goal: no console page scrolls sideways at 1,400 or 800 px, and the nav bar is as wide
    as the page (it used to stop short of a page that a long key made 1,962 px wide).

    Method: a journal with a 256-character business key parked in the attention queue;
    sign in as root; at each page measure the document's scroll width against the viewport
    and the header's width against the document's, then the repair plan page a form answers
    with; keep the attention page at 800 px as a screenshot.
    """
    chromium()
    world, long = _world(processes.db_url)
    url, _ = processes.server()
    shots = artifacts()
    with browser_context(tmp_path / "root") as context:
        page = context.new_page()
        page.set_viewport_size({"width": width, "height": 900})
        sign_in(page, url, world.tokens["root"])
        measured = {}
        for path in _pages(world, long):
            page.goto(f"{url}{path}")
            measured[path] = page.evaluate(
                "[document.documentElement.scrollWidth,"
                " document.querySelector('header').getBoundingClientRect().width]"
            )
        # The repair plan is a form's answer: reach it as a person does.
        page.goto(f"{url}/console/instances/{long}")
        form = page.locator("#repair-form")
        form.locator("select[name=kind]").select_option("resume")
        form.locator("input[name=reason]").fill("the long key's plan page")
        form.locator("button").click()
        assert page.locator(".diff").is_visible()
        measured["plan"] = page.evaluate(
            "[document.documentElement.scrollWidth,"
            " document.querySelector('header').getBoundingClientRect().width]"
        )
        too_wide = {p: m for p, m in measured.items() if m[0] > width or m[1] < m[0]}
        assert too_wide == {}, f"pages wider than {width} px or with a short nav: {too_wide}"
        page.goto(f"{url}/console/attention")
        assert LONG_KEY in page.locator("#attention").inner_text()
        if width == 800:
            page.screenshot(path=shots / "attention-800.png", full_page=True)
            keep_for_docs(shots, ["attention-800.png"])


def test_errors_root_and_insecure_mode_in_the_browser(processes: Any, tmp_path: Path) -> None:
    """Goal: in the browser, `/` leads to the console's sign-in, an error page keeps the nav
    bar and its link goes back to the instance, and a server without authentication offers
    no "Sign out".

    Method: open `/`: the sign-in form. Sign in as olga, send a resolve-effect plan with an
    evidence field that is not JSON: a 422 page with the nav; follow "Back to the instance":
    the instance page. Then a second server with ``--insecure-no-auth``: its list page has
    no sign-out button.
    """
    chromium()
    world = build(processes.db_url)
    url, _ = processes.server()
    with browser_context(tmp_path / "olga") as context:
        page = context.new_page()
        page.goto(f"{url}/")
        assert page.url == f"{url}/console/sign-in"
        sign_in(page, url, world.tokens["olga"])
        page.goto(f"{url}/console/instances/{world.parked}")
        form = page.locator("#repair-form")
        form.locator("select[name=seq]").select_option("1")
        form.locator("input[name=evidence]").fill("{not json")
        form.locator("input[name=reason]").fill("try")
        form.locator("button").click()
        assert "422" in page.locator("h1").inner_text()
        assert page.locator("header nav").is_visible()
        page.click("#back")
        page.wait_for_url(f"{url}/console/instances/{world.parked}")
    open_url, _ = processes.server("--insecure-no-auth")
    with browser_context(tmp_path / "anyone") as context:
        page = context.new_page()
        page.goto(f"{open_url}/console/instances")
        assert page.locator("#no-sign-in").is_visible()
        assert page.get_by_role("button", name="Sign out").count() == 0
