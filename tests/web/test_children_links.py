"""Parents and children are linked both ways in every face: ``ledgerflow show`` (its table and
``--json``), the HTTP instance page and the console's. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

from click.testing import CliRunner
from console_client import signed_in
from starlette.exceptions import StarletteDeprecationWarning

import child_compensation_world
import ledgerflow as lf
from ledgerflow.cli.main import cli
from ledgerflow.operators.service import Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

registry = lf.Registry()


@registry.workflow(name="kid", version=1)
async def kid(ctx: lf.WorkflowContext, n: int) -> int:
    return n * 2


@registry.workflow(name="mum", version=1)
async def mum(ctx: lf.WorkflowContext, n: int) -> list[Any]:
    handles = [await ctx.start_child(kid, i) for i in range(n)]
    return [await h.result() for h in handles]


def _family(url: str) -> tuple[str, list[str]]:
    async def main() -> tuple[str, list[str]]:
        async with lf.Engine(url, registry) as engine:
            started = await engine.start("mum", key="m-1", input=2)
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            assert await engine.result(started.instance_id, timeout=10) == [0, 2]
            detail = await engine.detail(started.instance_id)
            return started.instance_id, [c.instance_id for c in detail.children]

    return asyncio.run(main())


def test_show_links_a_parent_and_its_children_both_ways(journal_url: str) -> None:
    """Goal: ``show PARENT`` lists its children (step, id, status); ``show CHILD`` names its
    parent, run and step; ``--json`` carries the same links."""
    parent, children = _family(journal_url)
    assert len(children) == 2
    shown = CliRunner().invoke(cli, ["show", parent, "--db", journal_url])
    assert shown.exit_code == 0, shown.output
    assert "children" in shown.output
    for child in children:
        assert child in shown.output
    shown = CliRunner().invoke(cli, ["show", children[1], "--db", journal_url])
    assert shown.exit_code == 0, shown.output
    assert f"{parent} (run 1, step 2)" in shown.output
    as_json = CliRunner().invoke(cli, ["show", parent, "--db", journal_url, "--json"])
    data = json.loads(as_json.output)
    assert [c["instance_id"] for c in data["children"]] == children
    assert [c["parent_seq"] for c in data["children"]] == [1, 2]


def test_the_api_links_a_parent_and_its_children_both_ways(journal_url: str) -> None:
    """Goal: GET /v1/instances/PARENT lists its children; the child's page names its parent."""
    parent, children = _family(journal_url)
    with Operations(journal_url) as operations:
        token = operations.tokens().create(
            name="root", role="admin", tenant="*", created_by="test"
        )[0]
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(journal_url), headers=headers) as api:
        page = api.get(f"/v1/instances/{parent}")
        assert page.status_code == 200, page.text
        assert [c["instance_id"] for c in page.json()["children"]] == children
        page = api.get(f"/v1/instances/{children[0]}")
        assert page.status_code == 200, page.text
        instance = page.json()["instance"]
        assert (instance["parent_instance_id"], instance["parent_seq"]) == (parent, 1)
        assert page.json()["children"] == []


def test_the_console_links_a_parent_and_its_children_both_ways(journal_url: str) -> None:
    """Goal: the console's instance page of a parent links each child; a child's links its
    parent, with the run and step that started it."""
    parent, children = _family(journal_url)
    with signed_in(journal_url) as console:
        page = console.get(f"/console/instances/{parent}")
        assert page.status_code == 200, page.text
        for child in children:
            assert f'href="/console/instances/{child}"' in page.text
        page = console.get(f"/console/instances/{children[1]}")
        assert page.status_code == 200, page.text
        assert f'href="/console/instances/{parent}"' in page.text
        assert "(run 1, step 2)" in page.text


def test_a_compensating_child_is_shown_at_its_own_position_in_every_face(journal_url: str) -> None:
    """Goal: a parent whose saga undid a child with its compensating workflow lists that
    instance among its children, at its compensation step (the child's position, negated), in
    ``show --json``, the API and the console; the compensating instance names its parent."""

    async def main() -> tuple[str, str]:
        async with lf.Engine(journal_url, child_compensation_world.registry) as engine:
            started = await engine.start("trip", key="t-1", input=2)
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.COMPENSATED
            [undo] = await engine.list(workflow="unbook", limit=5)
            return started.instance_id, undo.instance_id

    parent, undo = asyncio.run(main())
    as_json = CliRunner().invoke(cli, ["show", parent, "--db", journal_url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    shown = {c["instance_id"]: c for c in json.loads(as_json.output)["children"]}
    assert shown[undo]["parent_seq"] == -1  # the child was step 1
    assert shown[undo]["status"] == "SUCCEEDED"
    assert [s["seq"] for s in json.loads(as_json.output)["steps"] if s["seq"] < 0] == [-1]
    with Operations(journal_url) as operations:
        token = operations.tokens().create(
            name="root", role="admin", tenant="*", created_by="test"
        )[0]
    with TestClient(create_app(journal_url), headers={"Authorization": f"Bearer {token}"}) as api:
        page = api.get(f"/v1/instances/{parent}")
        assert page.status_code == 200, page.text
        assert undo in [c["instance_id"] for c in page.json()["children"]]
        mine = api.get(f"/v1/instances/{undo}").json()["instance"]
        assert (mine["parent_instance_id"], mine["parent_seq"]) == (parent, -1)
    with signed_in(journal_url) as console:
        page = console.get(f"/console/instances/{parent}")
        assert page.status_code == 200, page.text
        assert f'href="/console/instances/{undo}"' in page.text
