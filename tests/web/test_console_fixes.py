"""The console's small fixes, page by page (in-process, Starlette's TestClient, over a real
SQLite journal): `/` leads to the console, error pages keep the nav bar and link back to the
instance, no "Sign out" where nobody signs in, a reason's code apart from its sentence and
the cause only where it says more, and ``serve`` saying where the console is."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from console_client import csrf_of
from perimeter_world import World, build
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow.operators.service import Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(f"sqlite:///{tmp_path}/console.db")


@contextmanager
def as_(world: World, name: str) -> Iterator[TestClient]:
    with TestClient(create_app(world.url), follow_redirects=False) as client:
        form = client.get("/console/sign-in")
        data = {"token": world.tokens[name], "csrf": csrf_of(form.text)}
        assert client.post("/console/sign-in", data=data).status_code == 303
        yield client


def test_the_root_leads_to_the_console(world: World) -> None:
    """Goal: `/` is not a 404: a person who opens the server's address reaches the console.

    Method: GET / without a session: 303 to /console, which sends to the sign-in form.
    """
    with TestClient(create_app(world.url), follow_redirects=False) as client:
        root = client.get("/")
        assert (root.status_code, root.headers["location"]) == (303, "/console")
        console = client.get("/console")
        assert console.headers["location"] == "/console/sign-in"


def test_an_error_page_keeps_the_nav_and_links_back_to_the_instance(world: World) -> None:
    """Goal: a refused form leaves the person in the console, one click from the instance.

    Method: as olga, plan a repair of an unknown kind on the parked instance: the 422 page
    has the nav bar and its link goes back to that instance; an instance that is not there
    is a 404 page with the nav bar that links to the list.
    """
    with as_(world, "olga") as client:
        page = client.get(f"/console/instances/{world.parked}").text
        refused = client.post(
            f"/console/instances/{world.parked}/repairs/plan",
            data={"csrf": csrf_of(page), "kind": "nonsense", "reason": "r"},
        )
        assert refused.status_code == 422
        assert '<a href="/console/attention">Attention</a>' in refused.text
        back = re.search(r'<a href="([^"]+)" id="back">([^<]+)</a>', refused.text)
        assert back is not None
        assert back.groups() == (f"/console/instances/{world.parked}", "Back to the instance")
        missing = client.get("/console/instances/wf_nobody")
        assert missing.status_code == 404
        assert "<nav>" in missing.text
        assert 'href="/console/instances" id="back">Back to the instances<' in missing.text


def test_sign_out_shows_only_where_someone_signed_in(world: World) -> None:
    """Goal: with ``--insecure-no-auth`` nobody signs in, so no "Sign out" is offered.

    Method: the same page from an app without authentication: no sign-out form, a note
    instead; signed in as olga: the form is there.
    """
    app = create_app(world.url, insecure_no_auth=True)
    with TestClient(app, base_url="http://localhost") as client:
        page = client.get("/console/instances").text
        assert "/console/sign-out" not in page
        assert 'id="no-sign-in"' in page
    with as_(world, "olga") as client:
        assert 'action="/console/sign-out"' in client.get("/console/instances").text


def test_the_reason_keeps_its_code_apart_and_the_cause_only_when_it_differs(
    world: World,
) -> None:
    """Goal: the Reason reads as a code and a sentence, not ``effect_outcome_unknown effect
    ...`` run together, and the Cause is not the Reason again.

    Method: the parked instance: its reason code is in its own element, the sentence in
    another; its cause is its code and reason again (the journal keeps it so), so no Cause
    line. The attention
    page lays the reason out the same way.
    """
    with Operations(world.url) as operations:
        record = operations.detail(world.parked).instance
    assert record.reason_code == "effect_outcome_unknown"
    assert record.cause == f"{record.reason_code}: {record.reason}"
    with as_(world, "olga") as client:
        page = client.get(f"/console/instances/{world.parked}").text
        reason = page.split('<dd id="reason">')[1].split("</dd>")[0]
        assert '<code class="code">effect_outcome_unknown</code><span class="said">effect ' in (
            reason
        )
        assert "<dt>Cause</dt>" not in page
        attention = client.get("/console/attention").text
        assert '<code class="code">effect_outcome_unknown</code><span class="said">' in attention


def test_serve_says_where_the_console_is(processes: Any) -> None:
    """Goal: ``serve`` prints the console's URL beside ``LISTENING``.

    Method: start ``ledgerflow serve --port 0``: the line after ``LISTENING URL`` is
    ``CONSOLE URL/console``, and that URL answers (a redirect to the sign-in form).
    """
    build(processes.db_url)
    url, process = processes.server()
    assert process.stdout is not None
    assert process.stdout.readline().strip() == f"CONSOLE {url}/console"
