"""The held durable locks through the HTTP API: ``GET /v1/locks`` on SQLite and PostgreSQL,
scoped to the principal's tenant like every read, a parked holder marked as such."""

from __future__ import annotations

import re
import warnings

from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.web import create_app
from lock_world import build

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def test_the_locks_are_listed_to_a_viewer_of_their_tenant(journal_url: str) -> None:
    """Goal: acme's viewer sees acme's two locks (the holder waiting inside its block with one
    waiter in turn; the parked holder marked parked) and never globex's; an admin sees all
    three; nobody unauthenticated sees any.

    Method: the lock world's journal; GET /v1/locks with each token and with none.
    """
    world = build(journal_url)
    with TestClient(create_app(world.url), follow_redirects=False) as client:
        response = client.get(
            "/v1/locks", headers={"Authorization": f"Bearer {world.tokens['victor']}"}
        )
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        assert [(i["name"], i["tenant"]) for i in items] == [
            ("account:1", "acme"),
            ("account:2", "acme"),
        ]
        held, parked = items
        assert held["holder"]["instance_id"] == world.holder
        assert held["holder"]["status"] == "WAITING"
        assert held["holder"]["parked"] is False
        assert [w["instance_id"] for w in held["waiters"]] == [world.waiter]
        assert parked["holder"]["instance_id"] == world.parked
        assert parked["holder"]["status"] == "MANUAL_INTERVENTION"
        assert parked["holder"]["parked"] is True
        assert parked["waiters"] == []
        every = client.get("/v1/locks", headers={"Authorization": f"Bearer {world.tokens['root']}"})
        assert [i["holder"]["instance_id"] for i in every.json()["items"]] == [
            world.holder,
            world.foreign,
            world.parked,
        ]
        assert client.get("/v1/locks").status_code == 401


def test_the_console_lists_the_locks_and_marks_the_parked_holder(journal_url: str) -> None:
    """Goal: the console's Locks page shows acme's locks to acme's viewer, the parked holder
    marked, the waiter in turn, and nothing of globex's.

    Method: sign in with the viewer's token and read /console/locks.
    """
    world = build(journal_url)
    with TestClient(create_app(world.url), follow_redirects=False) as client:
        form = client.get("/console/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        signed_in = client.post(
            "/console/sign-in", data={"token": world.tokens["victor"], "csrf": csrf.group(1)}
        )
        assert signed_in.status_code == 303
        page = client.get("/console/locks")
        assert page.status_code == 200, page.text
        assert world.holder in page.text
        assert world.waiter in page.text
        assert world.parked in page.text
        assert "parked: keeps the lock" in page.text
        assert world.foreign not in page.text
