"""The start options through the HTTP API and the command line: a delayed start answers
SCHEDULED and is listed so, a used key refused by its policy is a 409 problem (LF311) over
HTTP and a one-line error with the code on the command line, a new run and a signal-with-start
are on the audit record with the options asked for; a debounced start answers debounced and
the instance shows its deadline and collapsed starts. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import Engine
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


def test_the_api_starts_scheduled_refuses_a_used_key_and_signals_with_the_start(db: str) -> None:
    """Goal: POST /v1/instances takes the start options: start_in answers 201 SCHEDULED,
    if_running="fail" on the used key is 409 with LF311 naming the holder, a signal rides
    with a start (the inbox holds it), and a bad policy name is a 422.

    Method: four requests with a signaller's token; read the instance and its inbox back."""
    with Operations(db) as operations:
        token = operations.tokens().create(
            name="sam", role="signaller", tenant="default", created_by="test"
        )[0]
    auth = {"Authorization": f"Bearer {token}"}
    body = {"workflow_name": "order", "business_key": "api-1", "input": sample_order(1)}
    with TestClient(create_app(db, registry=registry), raise_server_exceptions=False) as client:
        scheduled = client.post("/v1/instances", json={**body, "start_in": 600}, headers=auth)
        assert scheduled.status_code == 201, scheduled.text
        instance = scheduled.json()["instance"]
        assert instance["status"] == "SCHEDULED"
        refused = client.post("/v1/instances", json={**body, "if_running": "fail"}, headers=auth)
        assert refused.status_code == 409, refused.text
        problem = refused.json()
        assert problem["type"] == "urn:ledgerflow:error:LF311"
        assert instance["instance_id"] in refused.text
        signalled = {
            **body,
            "business_key": "api-2",
            "signal": "note",
            "signal_event_id": "e-1",
            "signal_payload": {"n": 1},
        }
        both = client.post("/v1/instances", json=signalled, headers=auth)
        assert both.status_code == 201, both.text
        bad = client.post("/v1/instances", json={**body, "if_ended": "maybe"}, headers=auth)
        assert bad.status_code == 422, bad.text
    with Operations(db) as operations:
        detail = operations.detail(both.json()["instance"]["instance_id"])
        assert [e.event_id for e in detail.inbox] == ["e-1"]
        [start] = [
            r
            for r in operations.audit(AuditQuery(limit=50))
            if r.kind == "start"
            and r.actor == "sam"
            and r.outcome == "applied"
            and r.instance_id == detail.instance.instance_id
        ]
        assert json.loads(start.plan)["signal"] == "note"


def test_the_command_line_schedules_lists_refuses_and_starts_a_new_run(
    db: str, entry: Entry
) -> None:
    """Goal: ``ledgerflow start --start-in`` prints SCHEDULED and ``list --status SCHEDULED``
    shows it; ``--if-running fail`` on the used key exits 1 with LF311; once the instance is
    cancelled (ended), ``--if-ended new_run`` starts its run 2.

    Method: the real entry point in-process on one journal."""
    order = json.dumps(sample_order(1))
    code, out, err = entry(
        "start", CODE, "order", "--key", "cli-1", "--input", order, "--start-in", "600",
        "--json", "--db", db,
    )  # fmt: skip
    assert code == 0, err
    started = json.loads(out)
    assert started["status"] == "SCHEDULED"
    code, out, err = entry("list", "--status", "SCHEDULED", "--json", "--db", db)
    assert code == 0, err
    assert started["instance_id"] in out
    code, out, err = entry(
        "start", CODE, "order", "--key", "cli-1", "--input", order, "--if-running", "fail",
        "--db", db,
    )  # fmt: skip
    assert code == 1
    assert "LF311" in err

    async def work() -> None:
        async with Engine(db, registry) as engine:
            await engine.cancel(started["instance_id"], reason="not this one")
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

    asyncio.run(work())
    code, out, err = entry(
        "start", CODE, "order", "--key", "cli-1", "--input", order, "--if-ended", "new_run",
        "--json", "--db", db,
    )  # fmt: skip
    assert code == 0, err
    again = json.loads(out)
    assert again["created"] is True
    assert again["instance_id"] == started["instance_id"]
    with Operations(db) as operations:
        assert operations.detail(again["instance_id"]).instance.run == 2


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
