"""A workflow defect's exception and traceback are shown to operators and above only: viewers
and signallers see them withheld, through the HTTP API and in the console (issue 22, item 8).
The app runs in-process over a real journal, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning
from test_console import sign_in

import ledgerflow as lf
from ledgerflow.operators.disclosure import WITHHELD
from ledgerflow.operators.service import Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

# What the broken code was holding when it raised: it must reach operators only.
SECRET = "sk_live_4242-in-the-exception"
ONCE = lf.RetryPolicy(attempts_max=1, backoff_initial=timedelta(milliseconds=1))
registry = lf.Registry()


def read_config(name: str) -> str:
    raise KeyError(f"no setting {name!r} beside {SECRET}")


@registry.workflow(name="broken", version=1, defect_retry=ONCE)
async def broken(ctx: lf.WorkflowContext, _: None) -> str:
    return str(await ctx.step("config", read_config, "currency", retry=ONCE))


ROLES = {"victor": "viewer", "sam": "signaller", "olga": "operator", "ada": "admin"}


@pytest.fixture
def world(journal_url: str) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    """A journal holding one instance parked ``workflow_defect``, a token per role, and the
    app over it."""

    async def park() -> str:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start("broken", key="b-1", tenant="acme")
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            return started.instance_id

    instance_id = asyncio.run(park())
    with Operations(journal_url) as operations:
        assert operations.detail(instance_id).instance.reason_code == "workflow_defect"
        tokens = {
            name: operations.tokens().create(
                name=name, role=role, tenant="acme", created_by="test"
            )[0]
            for name, role in ROLES.items()
        }
    with TestClient(
        create_app(journal_url, registry=registry),
        raise_server_exceptions=False,
        follow_redirects=False,
    ) as client:
        yield client, tokens, instance_id


def _api_answers(client: TestClient, token: str, instance_id: str) -> list[Any]:
    auth = {"Authorization": f"Bearer {token}"}
    answers = [
        client.get(f"/v1/instances/{instance_id}", headers=auth),
        client.get("/v1/instances", headers=auth),
        client.get("/v1/attention", headers=auth),
        client.get("/v1/workflows/broken/keys/b-1", headers=auth),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
    return [a.text for a in answers]


def test_the_api_shows_a_defects_traceback_to_operators_only(
    world: tuple[TestClient, dict[str, str], str],
) -> None:
    """Goal: the exception text and the traceback of a parked defect (the instance's reason
    and cause, the step's traceback) are withheld from a viewer and a signaller, in every
    answer that carries them, and shown to an operator and an admin.

    Method: GET the instance, the listing, the attention queue and the instance by key with
    each token, and (signaller) start the same key again; the viewer's and signaller's
    answers hold neither the secret nor "Traceback" but the withheld note; the operator's and
    admin's hold both. Then the admin forces it FAILED: the viewer's result answer (409) does
    not carry the cause's traceback either.
    """
    client, tokens, instance_id = world
    for name in ("victor", "sam"):
        texts = _api_answers(client, tokens[name], instance_id)
        for text in texts:
            assert SECRET not in text, (name, text[:300])
            assert "Traceback" not in text, (name, text[:300])
        assert WITHHELD in texts[0]
        detail = client.get(
            f"/v1/instances/{instance_id}", headers={"Authorization": f"Bearer {tokens[name]}"}
        ).json()
        assert detail["instance"]["reason_code"] == "workflow_defect"
        assert [s["error_traceback"] for s in detail["steps"]] == [WITHHELD]
    again = client.post(
        "/v1/instances",
        json={"workflow": "broken", "key": "b-1", "tenant": "acme"},
        headers={"Authorization": f"Bearer {tokens['sam']}"},
    )
    assert again.status_code == 200, again.text
    assert SECRET not in again.text
    assert WITHHELD in again.text
    for name in ("olga", "ada"):
        first = _api_answers(client, tokens[name], instance_id)[0]
        assert SECRET in first
        assert "Traceback (most recent call last)" in first
    forced = client.post(
        f"/v1/instances/{instance_id}/repairs",
        json={"kind": "force-terminal", "status": "FAILED", "reason": "give up"},
        headers={"Authorization": f"Bearer {tokens['ada']}"},
    )
    assert forced.status_code == 200, forced.text
    result = client.get(
        f"/v1/instances/{instance_id}/result",
        headers={"Authorization": f"Bearer {tokens['victor']}"},
    )
    assert result.status_code == 409, result.text
    assert SECRET not in result.text
    assert "Traceback" not in result.text


def test_the_console_shows_a_defects_traceback_to_operators_only(
    world: tuple[TestClient, dict[str, str], str],
) -> None:
    """Goal: the console's pages withhold a defect's exception and traceback from a viewer
    and show them to an operator.

    Method: signed in as victor, the instance page, the instances list and the attention
    page hold neither the secret nor "Traceback"; signed in as olga, the instance page holds
    the secret.
    """
    client, tokens, instance_id = world
    sign_in(client, tokens["victor"])
    for page in (f"/console/instances/{instance_id}", "/console/instances", "/console/attention"):
        html = client.get(page)
        assert html.status_code == 200, html.text
        assert SECRET not in html.text, page
        assert "Traceback" not in html.text, page
    client.cookies.clear()
    sign_in(client, tokens["olga"])
    assert SECRET in client.get(f"/console/instances/{instance_id}").text
