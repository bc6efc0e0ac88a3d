"""Debounced starts through the HTTP API and the command line (issue 27): a second start of
the key while it is pending answers debounced (200 over HTTP, "debounced" on the command
line), the instance shows it pending with its deadline and the count of collapsed starts, the
start is on the audit record as applied with its debounce options, and a combination that
cannot be meant is a 4xx problem or a one-line error with its code. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.demo.order import registry, sample_order
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

Entry = Callable[..., tuple[int, str, str]]
CODE = "ledgerflow.demo.order:registry"


@pytest.fixture
def db(journal_url: str) -> str:
    with Operations(journal_url, registry=registry, migrate=None):
        pass
    return journal_url


def test_the_api_debounces_a_start_and_shows_it_pending(db: str) -> None:
    """Goal: POST /v1/instances with debounce_seconds answers 201 created, then 200 with
    debounced true for another input of the key; GET shows the instance SCHEDULED, reason code
    "debounced" with its deadline and "1 later start(s) collapsed"; both starts are audited as
    applied under the token's principal with debounce_seconds; a debounce with start_in is a
    422 LF110 and so is a negative window.

    Method: requests with a signaller's token through the app on the journal."""
    with Operations(db) as operations:
        token = operations.tokens().create(
            name="sam", role="signaller", tenant="default", created_by="test"
        )[0]
    auth = {"Authorization": f"Bearer {token}"}
    body = {
        "workflow_name": "order",
        "business_key": "deb-1",
        "input": sample_order(1),
        "debounce_seconds": 600,
        "debounce_max_seconds": 3600,
    }
    with TestClient(create_app(db, registry=registry), raise_server_exceptions=False) as client:
        first = client.post("/v1/instances", json=body, headers=auth)
        assert first.status_code == 201, first.text
        assert (first.json()["created"], first.json()["debounced"]) == (True, False)
        second = client.post("/v1/instances", json={**body, "input": sample_order(2)}, headers=auth)
        assert second.status_code == 200, second.text
        assert (second.json()["created"], second.json()["debounced"]) == (False, True)
        iid = first.json()["instance"]["instance_id"]
        shown = client.get(f"/v1/instances/{iid}", headers=auth)
        assert shown.status_code == 200, shown.text
        instance = shown.json()["instance"]
        assert (instance["status"], instance["reason_code"]) == ("SCHEDULED", "debounced")
        assert "1 later start(s) collapsed" in instance["reason"]
        assert instance["input"] == sample_order(2)
        both = client.post("/v1/instances", json={**body, "start_in": 5}, headers=auth)
        assert both.status_code == 422, both.text
        assert both.json()["type"] == "urn:ledgerflow:error:LF110"
        negative = client.post("/v1/instances", json={**body, "debounce_seconds": -1}, headers=auth)
        assert negative.status_code == 422, negative.text
    with Operations(db) as operations:
        starts = [
            r
            for r in operations.audit(AuditQuery(limit=50))
            if r.kind == "start" and r.actor == "sam" and r.instance_id == iid
        ]
    assert [r.outcome for r in starts] == ["applied", "applied"]
    assert all(json.loads(r.plan)["debounce_seconds"] == 600 for r in starts)


def test_the_command_line_debounces_a_start_and_shows_it_pending(db: str, entry: Entry) -> None:
    """Goal: ``ledgerflow start --debounce 600`` creates the instance SCHEDULED; a second one
    with another input prints "debounced into the pending start" (``--json``: debounced
    true); ``show`` prints its deadline and the count of collapsed starts; ``--debounce`` with
    ``--start-in`` and ``--debounce-max`` shorter than the window are one-line errors LF110.

    Method: the real entry point in-process on one journal."""
    first, second = json.dumps(sample_order(1)), json.dumps(sample_order(2))
    args = ("start", CODE, "order", "--key", "deb-cli", "--debounce", "600", "--db", db)
    code, out, err = entry(*args, "--input", first, "--json")
    assert code == 0, err
    started = json.loads(out)
    assert (started["status"], started["created"], started["debounced"]) == (
        "SCHEDULED", True, False,
    )  # fmt: skip
    code, out, err = entry(*args, "--input", second)
    assert code == 0, err
    assert "debounced into the pending start" in out
    code, out, err = entry(*args, "--input", second, "--json")
    assert code == 0, err
    assert json.loads(out)["debounced"] is True
    code, out, err = entry("show", started["instance_id"], "--db", db)
    assert code == 0, err
    assert "debounced" in out
    assert "2 later start(s) collapsed" in " ".join(out.split())
    for bad in (("--start-in", "5"), ("--debounce-max", "60")):
        code, out, err = entry(*args, "--input", second, *bad)
        assert code == 1, out
        assert "LF110" in err
        assert len(err.strip().splitlines()) == 1, err
