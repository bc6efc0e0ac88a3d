"""Updates and published values over the HTTP API (``/v1``): authenticated, audited and
held to the principal's tenant and role, as a signal is.

The app runs in-process (Starlette's TestClient) against a real SQLite file, with the
workflows' registry (an update's validator runs where the request is taken); the worker is
driven in-process until nothing is due, so no test waits on time.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_client import signed_in

import ledgerflow as lf
from ledgerflow import Engine, SyncEngine
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    from starlette.exceptions import StarletteDeprecationWarning

    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def _registry() -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="adder", version=1)
    async def adder(ctx: lf.WorkflowContext, total: int) -> int:
        ctx.publish("total", total)
        await ctx.handle_updates("add", lambda amount: total + amount)
        return total

    @registry.update_validator("adder", "add")
    def positive(amount: Any) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError("add takes a positive amount")

    return registry


class World:
    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.registry = _registry()
        self.engine = SyncEngine(self.url, self.registry)
        self.client = TestClient(create_app(self.url, registry=self.registry))
        self.tokens: dict[str, str] = {}

    def auth(self, name: str, role: str = "signaller", tenant: str = "default") -> dict[str, str]:
        if name not in self.tokens:
            with Operations(self.url) as operations:
                self.tokens[name], _ = operations.tokens().create(
                    name=name, role=role, tenant=tenant, created_by="t"
                )
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def work(self) -> None:
        async def main() -> None:
            async with Engine(self.url, self.registry) as engine:
                await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

        asyncio.run(main())

    def update(self, iid: str, body: Any, *, by: str = "app", **role: str) -> httpx.Response:
        return self.client.post(
            f"/v1/instances/{iid}/updates/add", json=body, headers=self.auth(by, **role)
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "journal.db")
    with w.client:
        yield w
    w.engine.close()


def test_an_update_over_http_is_stored_answered_once_and_audited(world: World) -> None:
    """Goal: a refused payload is 422 with nothing in the inbox; an accepted one not answered
    within its timeout is 202; once handled, the same update_id is 200 with the first reply
    and stores nothing; the audit log holds the update (applied, then no-op) under the
    principal; the values route reads the published value and the reply."""
    iid = str(world.engine.start("adder", key="h-1", input=40).instance_id)
    world.work()
    refused = world.update(iid, {"update_id": "u0", "payload": -1})
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "LF560"
    assert world.engine.store.inbox(world.engine.get(iid).instance_id) == []
    stored = world.update(iid, {"update_id": "u1", "payload": 2, "timeout": 0})
    assert stored.status_code == 202, stored.text
    assert stored.json()["replied"] is False
    world.work()
    again = world.update(iid, {"update_id": "u1", "payload": 2, "timeout": 5})
    assert again.status_code == 200, again.text
    assert again.json()["reply"] == 42
    assert len(world.engine.store.inbox(world.engine.get(iid).instance_id)) == 1
    records = world.engine.store.audit_records(AuditQuery(kind="update"))
    assert [(r.actor, r.outcome) for r in records] == [
        ("app", "refused"),
        ("app", "applied"),
        ("app", "no-op"),
    ]
    assert "positive amount" in (records[0].refusal or "")
    value = world.client.get(f"/v1/instances/{iid}/values/total", headers=world.auth("app"))
    assert value.json() == {**value.json(), "published": True, "value": 40, "version": 1}
    reply = world.client.get(f"/v1/instances/{iid}/values/update:u1", headers=world.auth("app"))
    assert reply.json()["value"] == {"reply": 42}
    missing = world.client.get(f"/v1/instances/{iid}/values/none", headers=world.auth("app"))
    assert missing.json()["published"] is False


def test_an_update_is_held_to_the_principals_role_and_tenant(world: World) -> None:
    """Goal: a viewer may read values but not send an update (403, recorded as refused); a
    principal of another tenant does not even find the instance (404)."""
    iid = str(world.engine.start("adder", key="h-2", input=1).instance_id)
    world.work()
    viewer = world.update(iid, {"update_id": "v", "payload": 1}, by="viewer", role="viewer")
    assert viewer.status_code == 403, viewer.text
    other = world.update(iid, {"update_id": "o", "payload": 1}, by="other", tenant="acme")
    assert other.status_code == 404, other.text
    read = world.client.get(f"/v1/instances/{iid}/values/total", headers=world.auth("viewer"))
    assert read.status_code == 200
    assert world.engine.store.inbox(world.engine.get(iid).instance_id) == []
    refusals = world.engine.store.audit_records(AuditQuery(kind="update"))
    assert [(r.actor, r.outcome) for r in refusals] == [("viewer", "refused")]


def test_the_console_shows_what_the_instance_published(world: World) -> None:
    """Goal: the console's instance page lists each published value with its version, the
    run and position that published it (an update's reply among them)."""
    iid = str(world.engine.start("adder", key="h-3", input=7).instance_id)
    world.work()
    assert world.update(iid, {"update_id": "c1", "payload": 1, "timeout": 0}).status_code == 202
    world.work()
    with signed_in(world.url, role="viewer", tenant="default") as console:
        page = console.get(f"/console/instances/{iid}")
    assert page.status_code == 200
    section = page.text.split('<section id="values">', 1)[1].split("</section>", 1)[0]
    assert "<code>total</code></td><td>1</td>" in section
    assert "<code>update:c1</code></td><td>1</td>" in section
    assert "&#34;reply&#34;: 8" in section or '"reply": 8' in section
