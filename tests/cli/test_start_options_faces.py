"""The start options through the HTTP API and the command line: a delayed start answers
SCHEDULED and is listed so, a used key refused by its policy is a 409 problem (LF311) over
HTTP and a one-line error with the code on the command line, a new run and a signal-with-start
are on the audit record with the options asked for. On SQLite and PostgreSQL.
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
