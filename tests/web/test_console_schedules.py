"""The console's schedules, on both backends: the list and a schedule's page with its latest
slots and their reasons; an operator pauses, resumes and triggers from the page (each audited
under the signed-in principal, a trigger sent twice starting one instance); a viewer is
offered no form and a forged post is refused (403, audited as refused); another tenant's
principal sees no schedule."""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from console_client import csrf_of
from starlette.exceptions import StarletteDeprecationWarning

import ledgerflow as lf
import schedule_racing
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.testing import FakeClock
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

NAME = "heartbeat"


def _declare(url: str) -> None:
    async def main() -> None:
        clock = FakeClock(1_800_000_000.0, autojump=False)
        async with lf.Engine(url, schedule_racing.registry, clock=clock) as engine:
            await engine.tick_schedules()
            clock.advance(2.5)
            await engine.tick_schedules()

    asyncio.run(main())


@contextmanager
def _console(url: str, role: str, tenant: str = "default") -> Iterator[TestClient]:
    with Operations(url, migrate=None) as operations:
        token, _ = operations.tokens().create(
            name=f"{role}-{tenant}", role=role, tenant=tenant, created_by="test"
        )
    app = create_app(url, registry=schedule_racing.registry)
    with TestClient(app, follow_redirects=False) as client:
        form = client.get("/console/sign-in")
        done = client.post("/console/sign-in", data={"token": token, "csrf": csrf_of(form.text)})
        assert done.status_code == 303, done.text
        yield client


def test_an_operator_pauses_resumes_and_triggers_from_the_console(journal_url: str) -> None:
    _declare(journal_url)
    with _console(journal_url, "operator") as console:
        listing = console.get("/console/schedules")
        assert listing.status_code == 200, listing.text
        assert f'href="/console/schedules/{NAME}"' in listing.text
        page = console.get(f"/console/schedules/{NAME}")
        assert page.status_code == 200, page.text
        assert "FIRED" in page.text  # the slots the ticks decided, with their reasons
        assert 'id="pause-form"' in page.text
        assert 'id="resume-form"' not in page.text
        csrf = csrf_of(page.text)
        paused = console.post(f"/console/schedules/{NAME}/pause",
                              data={"csrf": csrf, "reason": "maintenance"})  # fmt: skip
        assert paused.status_code == 303, paused.text
        page = console.get(paused.headers["location"])
        assert re.search(r'id="state"><strong>paused</strong>', page.text)
        assert 'id="resume-form"' in page.text
        assert 'id="done"' in page.text
        resumed = console.post(f"/console/schedules/{NAME}/resume", data={"csrf": csrf})
        assert resumed.status_code == 303, resumed.text
        started = [
            console.post(f"/console/schedules/{NAME}/trigger",
                         data={"csrf": csrf, "request_id": "by-hand-1", "reason": "now"})
            for _ in range(2)
        ]  # fmt: skip
        assert [s.status_code for s in started] == [303, 303]
        assert started[0].headers["location"] == started[1].headers["location"]
        assert console.get(started[0].headers["location"]).status_code == 200
    with Operations(journal_url, migrate=None) as operations:
        records = operations.audit(AuditQuery(actor="operator-default"))
    assert [(r.kind, r.outcome) for r in records] == [
        ("schedule-pause", "applied"),
        ("schedule-resume", "applied"),
        ("schedule-trigger", "applied"),
        ("schedule-trigger", "no-op"),
    ]


def test_a_viewer_gets_no_form_and_a_forged_post_is_refused(journal_url: str) -> None:
    _declare(journal_url)
    with _console(journal_url, "viewer") as console:
        page = console.get(f"/console/schedules/{NAME}")
        assert page.status_code == 200, page.text
        assert '<form method="post" action="/console/schedules' not in page.text
        forged = console.post(f"/console/schedules/{NAME}/pause", data={"csrf": csrf_of(page.text)})
        assert forged.status_code == 403, forged.text
        missing = console.post(f"/console/schedules/{NAME}/pause", data={})
        assert missing.status_code == 403
    with Operations(journal_url, migrate=None) as operations:
        records = operations.audit(AuditQuery(actor="viewer-default"))
    assert [(r.kind, r.outcome) for r in records] == [("schedule-pause", "refused")]


def test_another_tenant_sees_no_schedule(journal_url: str) -> None:
    _declare(journal_url)
    with _console(journal_url, "operator", tenant="other") as console:
        listing = console.get("/console/schedules")
        assert listing.status_code == 200
        assert 'id="schedules-none"' in listing.text
        assert console.get(f"/console/schedules/{NAME}").status_code == 404
