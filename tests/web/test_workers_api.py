"""The live workers through the faces: ``GET /v1/workers`` and the console's Versions page, on
SQLite and PostgreSQL (``perimeter_world``'s journal, with workers registered through the
store as a worker process registers itself).
"""

from __future__ import annotations

import re
import time
import warnings

import pytest
from perimeter_world import World, build, registry
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.ledger.workers import WorkerRecord
from ledgerflow.model.ids import WorkerId
from ledgerflow.model.routing import Served
from ledgerflow.storage import open_store
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

# The world's pay v1 as deployed, and a v2 nobody started.
SERVES = (Served("pay", 1, registry.get("pay", 1).fingerprint), Served("pay", 2, "e" * 32))


@pytest.fixture
def world(journal_url: str) -> World:
    world = build(journal_url)
    store = open_store(journal_url)
    now = time.time()
    for worker_id, heartbeat in (("live-1", now), ("silent-1", now - 3600)):
        record = WorkerRecord(
            worker_id=WorkerId(worker_id),
            host="h1",
            pid=11,
            started_at=heartbeat,
            slots=32,
            heartbeat_at=heartbeat,
            serves=SERVES,
        )
        store.register_worker(record, now=heartbeat)
    store.close()
    return world


def test_the_live_workers_are_listed_to_every_viewer(world: World) -> None:
    """Goal: GET /v1/workers lists the live workers (a silent one is left out) with their
    slots and what they serve, to a viewer of any tenant; the versions listing names them as
    serving their version; the console shows the same.

    Method: two workers registered, one with an old heartbeat; ask as acme's viewer and
    globex's operator; sign in to the console and read the Versions page.
    """
    with TestClient(create_app(world.url), follow_redirects=False) as client:
        for name in ("victor", "gail"):
            response = client.get(
                "/v1/workers", headers={"Authorization": f"Bearer {world.tokens[name]}"}
            )
            assert response.status_code == 200, response.text
            [item] = response.json()["items"]
            assert (item["worker_id"], item["host"], item["pid"], item["slots"]) == (
                "live-1",
                "h1",
                11,
                32,
            )
            assert item["serves"] == [
                {"workflow_name": s.workflow_name, "workflow_version": s.workflow_version,
                 "fingerprint": s.fingerprint}
                for s in SERVES
            ]  # fmt: skip
            assert 0 <= item["heartbeat_age_seconds"] < 60
        assert client.get("/v1/workers").status_code == 401
        # The versions listing names the live workers that serve each version and fingerprint.
        versions = client.get(
            "/v1/versions", headers={"Authorization": f"Bearer {world.tokens['victor']}"}
        ).json()["items"]
        assert {(v["workflow_version"], tuple(v["served_by"])) for v in versions} == {
            (1, ("live-1",))
        }
        form = client.get("/console/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        signed_in = client.post(
            "/console/sign-in", data={"token": world.tokens["victor"], "csrf": csrf.group(1)}
        )
        assert signed_in.status_code == 303
        page = client.get("/console/versions").text
        assert "live-1" in page
        assert "silent-1" not in page
        assert "pay v2" in page
        assert "e" * 32 in page
