"""The repair plan -> apply round trip in a real browser (Debian's Chromium, driven by
Playwright, against ``ledgerflow serve`` over a real SQLite journal): what the operator typed
is what the repair records, TABs included.

``test_client_mistakes.py`` reads the confirmation form back as a browser would; this is the
browser itself, so the proof does not rest on how the test reads HTML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from perimeter_world import build

from browser import browser_context, chromium
from ledgerflow.operators.service import AuditQuery, Operations

pytestmark = pytest.mark.slow


def test_a_tab_in_the_reason_and_the_evidence_reaches_the_repair_unchanged(
    processes: Any, tmp_path: Path
) -> None:
    """Goal: the confirmation form's hidden fields carry the operator's text unchanged (a TAB
    in the reason used to come back as the literal ``\\x09``, and JSON evidence laid out with
    a TAB was refused when applied).

    Method: as olga, plan resolve-effect on the parked instance with a reason and evidence
    holding TABs (a text input keeps them), confirm in the browser: the repair is applied and
    its audit record holds the reason as typed and the evidence as its JSON value.
    """
    chromium()
    world = build(processes.db_url)
    url, _ = processes.server()
    reason = "the bank statement\tshows the charge"
    evidence = '{"statement":\t"r-17"}'
    with browser_context(tmp_path / "olga") as context:
        page = context.new_page()
        page.goto(f"{url}/console/sign-in")
        page.fill("input[name=token]", world.tokens["olga"])
        page.click("button[type=submit]")
        page.wait_for_url(f"{url}/console")
        page.goto(f"{url}/console/instances/{world.parked}")
        form = page.locator("#repair-form")
        form.locator("select[name=kind]").select_option("resolve-effect")
        form.locator("select[name=seq]").select_option("1")
        form.locator("select[name=applied]").select_option("yes")
        form.locator("input[name=evidence]").fill(evidence)
        form.locator("input[name=reason]").fill(reason)
        form.locator("button").click()
        page.click("#confirm-form button")
        page.wait_for_url(f"{url}/console/instances/{world.parked}?done=*")
        assert "Repair applied: audit record #" in page.locator("p.ok").inner_text()
    with Operations(processes.db_url) as operations:
        record = operations.audit(AuditQuery(instance_id=world.parked, kind="resolve-effect"))[-1]
    assert (record.outcome, record.reason) == ("applied", reason)
    assert json.loads(record.evidence or "") == json.loads(evidence)
