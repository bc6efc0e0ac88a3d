"""The console in a real browser: Debian's Chromium, driven by Playwright, against
``ledgerflow serve`` running as its own process over a real SQLite journal.

The operator's path at 3 a.m.: sign in with a token, find the parked instance, open it, see
the charge in doubt, plan a repair, read the diff, apply it, find the audit record. Then the
refusals: a viewer sees no repair form and a forged POST from the viewer's own session is
refused; another tenant's instance is a 404. Each main page is saved as a screenshot (see
``tests/browser.py`` for where).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from perimeter_world import build

from browser import artifacts, browser_context, chromium, keep_for_docs

pytestmark = pytest.mark.slow

SHOTS = [
    "sign-in.png",
    "instances.png",
    "instance.png",
    "repair-plan.png",
    "repaired.png",
    "attention.png",
    "audit.png",
    "versions.png",
]


def _sign_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/console/sign-in")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/console")


def test_an_operator_repairs_a_parked_instance(processes: Any, tmp_path: Path) -> None:
    """Goal: the whole repair path works in a browser, every hostile field stays inert, and
    each page is captured.

    Method: build the journal, serve it; sign in as olga (operator of acme); filter the list
    on MANUAL_INTERVENTION and open the one instance; the UNKNOWN charge is highlighted and
    the business key's markup is text (no dialog ever opens); plan resolve-effect with
    evidence and resume: the diff shows removed and added lines; apply: the page says which
    audit record, and the audit log shows olga's repair.
    """
    chromium()
    world = build(processes.db_url)
    url, _ = processes.server()
    shots = artifacts()
    dialogs: list[str] = []
    with browser_context(tmp_path / "olga") as context:
        page = context.new_page()
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(f"{url}/console/sign-in")
        page.screenshot(path=shots / "sign-in.png")
        _sign_in(page, url, world.tokens["olga"])
        page.goto(f"{url}/console/instances")
        page.screenshot(path=shots / "instances.png", full_page=True)
        page.select_option("select[name=status]", "MANUAL_INTERVENTION")
        page.click("form.filters button")
        rows = page.locator("tbody tr")
        assert rows.count() == 1
        rows.first.locator("a").click()
        page.wait_for_url(f"{url}/console/instances/{world.parked}")
        assert page.locator("h2.unknown").is_visible()
        assert page.locator("tr.effect-UNKNOWN").count() == 1
        assert "<script>alert('key')</script>" in page.locator("dd.key").inner_text()
        page.screenshot(path=shots / "instance.png", full_page=True)

        form = page.locator("#repair-form")
        form.locator("select[name=kind]").select_option("resolve-effect")
        form.locator("select[name=seq]").select_option("1")
        form.locator("select[name=applied]").select_option("yes")
        form.locator("input[name=evidence]").fill('{"statement": "r-17"}')
        form.locator("select[name=resume]").select_option("yes")
        form.locator("input[name=reason]").fill("the bank statement shows the charge")
        form.locator("button").click()
        assert page.locator(".diff-del").count() >= 1
        assert page.locator(".diff-add").count() >= 1
        assert "UNKNOWN" in page.locator(".diff").inner_text()
        page.screenshot(path=shots / "repair-plan.png", full_page=True)
        page.click("#confirm-form button")
        page.wait_for_url(f"{url}/console/instances/{world.parked}?done=*")
        assert "Repair applied: audit record #" in page.locator("p.ok").inner_text()
        audit = page.locator("#audit").inner_text()
        assert "olga" in audit
        assert "resolve-effect" in audit
        page.screenshot(path=shots / "repaired.png", full_page=True)

        for name in ("attention", "audit", "versions"):
            page.goto(f"{url}/console/{name}")
            page.screenshot(path=shots / f"{name}.png", full_page=True)
        # The world's worker signed off when it was done: the page says no worker is live.
        assert page.locator("#workers-none").is_visible()
    assert dialogs == []
    # Tokens are secrets: the server never writes one to its log.
    assert all(token not in processes.tail() for token in world.tokens.values())
    for name in SHOTS:
        assert (shots / name).stat().st_size > 0, name
    keep_for_docs(shots, SHOTS)


def test_a_viewer_cannot_repair_and_a_tenant_sees_only_its_own(
    processes: Any, tmp_path: Path
) -> None:
    """Goal: the console enforces the role and the tenant, not only its buttons.

    Method: sign in as victor (viewer of acme): the instance page has no repair or cancel
    form; a POST to the repair route from his own browser session, with his session's valid
    CSRF token, is refused (403) and one without it too; acme's instance stays parked. Then
    as gail (operator of globex) acme's instance URL is a 404 page.
    """
    chromium()
    world = build(processes.db_url)
    url, _ = processes.server()
    with browser_context(tmp_path / "victor") as context:
        page = context.new_page()
        _sign_in(page, url, world.tokens["victor"])
        page.goto(f"{url}/console/instances/{world.parked}")
        assert page.locator("#repair-form").count() == 0
        assert page.locator("#cancel-form").count() == 0
        csrf = page.locator("header input[name=csrf]").get_attribute("value")
        target = f"{url}/console/instances/{world.parked}/repairs"
        form = {"kind": "resume", "reason": "forged", "planned_generation": "0"}
        with_csrf = context.request.post(target, form={**form, "csrf": csrf or ""})
        without = context.request.post(target, form={**form, "csrf": "forged"})
        assert with_csrf.status == 403
        assert without.status == 403
        page.goto(f"{url}/console/instances/{world.parked}")
        assert "MANUAL_INTERVENTION" in page.locator("h1").inner_text()
    with browser_context(tmp_path / "gail") as context:
        page = context.new_page()
        _sign_in(page, url, world.tokens["gail"])
        response = page.goto(f"{url}/console/instances/{world.parked}")
        assert response is not None
        assert response.status == 404
        assert "404" in page.locator("h1").inner_text()
