"""The API's schedule routes, on both backends: a viewer lists and shows, an operator pauses,
resumes and triggers (each audited under the token's principal), a viewer's change is refused
403, another tenant's token sees no schedule (404, not even that it exists), and a trigger
repeated with its request id is the same instance."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest
from starlette.exceptions import StarletteDeprecationWarning

import ledgerflow as lf
import schedule_racing
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.testing import FakeClock
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def _declare(url: str) -> None:
    async def main() -> None:
        clock = FakeClock(1_800_000_000.0, autojump=False)
        async with lf.Engine(url, schedule_racing.registry, clock=clock) as engine:
            await engine.tick_schedules()
            clock.advance(2.5)
            await engine.tick_schedules()

    asyncio.run(main())


@pytest.fixture
def client(journal_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    _declare(journal_url)
    with Operations(journal_url) as operations:
        tokens = {
            name: operations.tokens().create(
                name=name, role=role, tenant=tenant, created_by="test"
            )[0]
            for name, role, tenant in (
                ("olga", "operator", "default"),
                ("vera", "viewer", "default"),
                ("otto", "operator", "other"),
            )
        }
    app = create_app(journal_url, registry=schedule_racing.registry)
    with TestClient(app) as test_client:
        yield test_client, tokens


def test_schedule_routes(client: tuple[TestClient, dict[str, str]], journal_url: str) -> None:
    api, tokens = client

    def as_(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tokens[name]}"}

    listed = api.get("/v1/schedules", headers=as_("vera"))
    assert listed.status_code == 200
    assert [s["name"] for s in listed.json()["items"]] == ["heartbeat"]
    shown = api.get("/v1/schedules/heartbeat", headers=as_("vera")).json()
    assert [s["outcome"] for s in shown["slots"]] == ["FIRED", "FIRED"]
    assert api.get("/v1/schedules", headers=as_("otto")).json()["items"] == []
    hidden = api.get("/v1/schedules/heartbeat", headers=as_("otto"))
    assert hidden.status_code == 404
    assert hidden.json()["code"] == "LF541"
    refused = api.post("/v1/schedules/heartbeat/pause", json={}, headers=as_("vera"))
    assert refused.status_code == 403
    paused = api.post("/v1/schedules/heartbeat/pause", json={"reason": "x"}, headers=as_("olga"))
    assert paused.json() == {"name": "heartbeat", "outcome": "applied"}
    again = api.post("/v1/schedules/heartbeat/pause", json={}, headers=as_("olga"))
    assert again.json()["outcome"] == "no-op"
    assert api.post("/v1/schedules/heartbeat/resume", json={}, headers=as_("olga")).json() == {
        "name": "heartbeat",
        "outcome": "applied",
    }
    body = {"request_id": "t-1", "reason": "now"}
    first = api.post("/v1/schedules/heartbeat/trigger", json=body, headers=as_("olga"))
    repeat = api.post("/v1/schedules/heartbeat/trigger", json=body, headers=as_("olga"))
    assert (first.status_code, repeat.status_code) == (201, 200)
    assert first.json()["business_key"] == "schedule:heartbeat:trigger:t-1"
    assert first.json()["instance_id"] == repeat.json()["instance_id"]
    with Operations(journal_url) as operations:
        kinds = [(a.kind, a.outcome) for a in operations.audit(AuditQuery(actor="olga"))]
        (refusal,) = operations.audit(AuditQuery(actor="vera"))
    assert (refusal.kind, refusal.outcome, refusal.role) == ("schedule-pause", "refused", "viewer")
    assert kinds == [
        ("schedule-pause", "applied"),
        ("schedule-pause", "no-op"),
        ("schedule-resume", "applied"),
        ("schedule-trigger", "applied"),
        ("schedule-trigger", "no-op"),
    ]
