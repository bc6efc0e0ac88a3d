"""What the console's instance page shows and offers, and the search filters the other browser
tests leave out, in a real browser (Debian's Chromium, driven by Playwright, against
``ledgerflow serve`` over a real SQLite journal) (issue 24: every console item has a browser
test). The same rules are checked on the HTML in test_console_actions.py, test_console_fixes.py
and test_console_search.py; here a person's browser sees them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from listing_world import start_instances
from perimeter_world import build, drain, registry

from browser import browser_context, chromium, sign_in
from ledgerflow.operators.service import Operations

pytestmark = pytest.mark.slow


def _options(page: Any, form: str, name: str) -> list[str]:
    return list(
        page.locator(f"{form} select[name={name}] option").evaluate_all(
            "options => options.map(o => o.value)"
        )
    )


def test_the_page_shows_input_result_and_only_the_forms_allowed(
    processes: Any, tmp_path: Path
) -> None:
    """Goal: an operator reads an instance's input and result on its page, and is offered only
    what the role and the state allow: no Cancel on an ended or a parked instance, no
    ``force-terminal`` (an admin's), the step of a repair chosen from the steps it may act
    on; the Reason reads as a code and a sentence, with no Cause repeating it.

    Method: the perimeter journal and one acme order shipped (SUCCEEDED). As olga (operator):
    the succeeded page shows the input's amount and the result's receipt, and no form; the
    waiting page offers Cancel; the parked page offers no Cancel, the kinds resolve-effect,
    skip-step, resume and cancel, the steps [blank, 1], and its reason's code stands apart
    from its sentence. As root (admin) the parked page offers force-terminal too.
    """
    chromium()
    world = build(processes.db_url)
    with Operations(processes.db_url, registry=registry) as operations:
        done = operations.start("pay", key="order-77", input={"amount": 77}, tenant="acme")
    drain(processes.db_url)
    with Operations(processes.db_url) as operations:
        operations.signal(done.instance_id, "shipped", event_id="s", payload=None, actor="test")
    drain(processes.db_url)
    url, _ = processes.server()
    with browser_context(tmp_path / "olga") as context:
        page = context.new_page()
        sign_in(page, url, world.tokens["olga"])
        page.goto(f"{url}/console/instances/{done.instance_id}")
        assert "SUCCEEDED" in page.locator("h1").inner_text()
        assert '"amount": 77' in page.locator("#input").inner_text()
        assert '"charged": 77' in page.locator("#result").inner_text()
        for form in ("#signal-form", "#cancel-form", "#repair-form"):
            assert page.locator(form).count() == 0, form
        page.goto(f"{url}/console/instances/{world.waiting}")
        assert page.locator("#cancel-form").is_visible()
        page.goto(f"{url}/console/instances/{world.parked}")
        assert page.locator("#cancel-form").count() == 0
        kinds = _options(page, "#repair-form", "kind")
        assert kinds == ["resolve-effect", "skip-step", "resume", "cancel"]
        assert _options(page, "#repair-form", "seq") == ["", "1"]
        assert page.locator("#reason code.code").inner_text() == "effect_outcome_unknown"
        said = page.locator("#reason .said").inner_text()
        assert said.startswith("effect ")
        assert "effect_outcome_unknown" not in said
        assert page.locator("dt", has_text="Cause").count() == 0
    with browser_context(tmp_path / "root") as context:
        page = context.new_page()
        sign_in(page, url, world.tokens["root"])
        page.goto(f"{url}/console/instances/{world.parked}")
        assert "force-terminal" in _options(page, "#repair-form", "kind")


def test_an_admin_filters_by_workflow_version_time_and_tenant(
    processes: Any, tmp_path: Path
) -> None:
    """Goal: the list's workflow, version, created-from/until (UTC) and tenant filters choose
    what they say, in the browser, and the form keeps them.

    Method: besides the perimeter journal, instances at fixed times: globex order v2 at
    t=1005 (the one to find), acme order v2 at 1005, globex order v1 at 1006, globex ship v2
    at 1007 and globex order v2 at 1020. As root (every tenant) fill workflow ``order``,
    version 2, tenant globex, from 00:16:40 until 00:16:50: one row, ``t-in``; the fields
    still hold what was typed.
    """
    chromium()
    world = build(processes.db_url)
    start_instances(processes.db_url, ("t-in", "globex", "order", 2, 1005.0),
                    ("t-acme", "acme", "order", 2, 1005.0), ("t-v1", "globex", "order", 1, 1006.0),
                    ("t-ship", "globex", "ship", 2, 1007.0),
                    ("t-late", "globex", "order", 2, 1020.0))  # fmt: skip
    url, _ = processes.server()
    with browser_context(tmp_path / "root") as context:
        page = context.new_page()
        sign_in(page, url, world.tokens["root"])
        page.goto(f"{url}/console/instances")
        form = page.locator("#filters")
        form.locator("input[name=workflow]").fill("order")
        form.locator("input[name=version]").fill("2")
        form.locator("input[name=tenant]").fill("globex")
        form.locator("input[name=created_from]").fill("1970-01-01T00:16:40")
        form.locator("input[name=created_until]").fill("1970-01-01T00:16:50")
        form.locator("button").click()
        page.wait_for_url(f"{url}/console/instances?*")
        assert page.locator("tbody td.key").all_inner_texts() == ["t-in"]
        assert form.locator("input[name=workflow]").input_value() == "order"
        assert form.locator("input[name=version]").input_value() == "2"
        assert form.locator("input[name=tenant]").input_value() == "globex"
        assert (
            form.locator("input[name=created_from]").input_value().startswith("1970-01-01T00:16:40")
        )
