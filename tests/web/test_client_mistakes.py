"""A client's mistake is a 4xx, never a 500 or a silent change: forged cursors, console form
text the API would refuse, the repair plan -> apply round trip, ``?done=`` and ``/readyz``. On
SQLite and PostgreSQL, in-process over a real journal (``perimeter_world``)."""

from __future__ import annotations

import base64
import html
import json
import re
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_client import csrf_of, signed_in
from perimeter_world import World, build
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import limits
from ledgerflow.cli.main import main
from ledgerflow.errors import StorageUnavailableError
from ledgerflow.operators.idempotency import Claim, Replay
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.testing import FakeClock
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def _cursor(position: list[Any]) -> str:
    """A cursor as the API encodes them (base64url of a JSON array), holding ``position``."""
    text = json.dumps(position)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# Positions no page ever ended at: a lone surrogate and a NUL in the text part (a 500 on
# SQLite and on PostgreSQL), a number that is not finite, the wrong shape or types.
FORGED = [
    _cursor([1.0, "\ud800"]),
    _cursor([1.0, "a\u0000b"]),
    _cursor([1.0, "\u202eevil"]),
    base64.urlsafe_b64encode(b'[1e999, "x"]').decode(),
    _cursor([True, "x"]),
    _cursor(["x"]),
    _cursor([1.0, "x", "y"]),
    _cursor([2**70]),
    _cursor([-1]),
    "not base64 at all!",
]


@pytest.fixture
def world(journal_url: str) -> World:
    return build(journal_url)


@pytest.fixture
def api(world: World) -> Iterator[TestClient]:
    headers = {"Authorization": f"Bearer {world.tokens['root']}"}
    with TestClient(create_app(world.url), headers=headers) as client:
        yield client


@pytest.mark.parametrize("cursor", FORGED)
def test_a_forged_cursor_is_422_on_every_route_that_takes_one(
    world: World, api: TestClient, cursor: str
) -> None:
    """Goal: no cursor a client makes up reaches the journal's query: every route that takes
    a cursor answers 422 LF124 (``[1.0, "\\ud800"]`` used to be a 500; a NUL too on
    PostgreSQL), the console with its error page, ``ledgerflow list`` with one line.

    Method: each forged cursor on /v1/instances, an instance's /inbox and /timeline, the
    console's instance list and an instance page's inbox and timeline, and ``list --cursor``.
    """
    waiting = world.waiting
    for path, params in [
        ("/v1/instances", {"cursor": cursor}),
        (f"/v1/instances/{waiting}/inbox", {"cursor": cursor}),
        (f"/v1/instances/{waiting}/timeline", {"cursor": cursor}),
    ]:
        answer = api.get(path, params=params)
        assert (answer.status_code, answer.json()["code"]) == (422, "LF124"), (path, answer.text)
    with signed_in(world.url) as console:
        for path, params in [
            ("/console/instances", {"cursor": cursor}),
            (f"/console/instances/{waiting}", {"inbox": cursor}),
            (f"/console/instances/{waiting}", {"timeline": cursor}),
        ]:
            page = console.get(path, params=params)
            assert page.status_code == 422, (path, page.text[:300])
            assert "LF124" in page.text
    argv = sys.argv
    sys.argv = ["ledgerflow", "list", "--db", world.url, "--cursor", cursor]
    try:
        with pytest.raises(SystemExit) as exit_:
            main()
    finally:
        sys.argv = argv
    assert exit_.value.code == 1


def test_console_forms_follow_the_api_text_rule(world: World) -> None:
    """Goal: a console form field the API would refuse is refused by the console too (a NUL
    in a cancel's reason was a 500 on PostgreSQL and stored on SQLite), JSON fields by the
    API body's reader, and nothing changes.

    Method: as an operator, cancel with a reason holding a NUL; plan a repair whose reason
    holds a NUL, whose evidence holds an escaped NUL, an integer past 64 bits, a NaN: each
    422, and the instance has no cancel request and no new audit record.
    """
    with Operations(world.url) as operations:
        before = len(operations.audit(AuditQuery(instance_id=world.parked)))
    with signed_in(world.url, role="operator", tenant="acme") as console:
        csrf = csrf_of(console.get(f"/console/instances/{world.waiting}").text)
        refused = console.post(
            f"/console/instances/{world.waiting}/cancel",
            data={"csrf": csrf, "reason": "stop\x00now"},
        )
        assert refused.status_code == 422, refused.text[:500]
        assert "NUL" in refused.text
        fields = {"csrf": csrf, "kind": "resolve-effect", "seq": "1", "applied": "yes",
                  "resume": "no", "compensate": "yes", "status": "", "result": ""}  # fmt: skip
        for reason, evidence, needle in [
            ("the\x00statement", '{"s": 1}', "NUL"),
            ("the statement", '{"s": "r\\u0000"}', "NUL"),
            ("the statement", '{"s": 100000000000000000000000}', "64 bits"),
            ("the statement", '{"s": NaN}', "finite"),
        ]:
            plan = console.post(
                f"/console/instances/{world.parked}/repairs/plan",
                data={**fields, "reason": reason, "evidence": evidence},
            )
            assert plan.status_code == 422, (evidence, plan.text[:500])
            assert needle in plan.text
    with Operations(world.url) as operations:
        assert operations.detail(world.waiting).instance.cancel_requested_at is None
        assert len(operations.audit(AuditQuery(instance_id=world.parked))) == before


def _hidden_fields(page: str) -> dict[str, str]:
    """The hidden fields of a page's confirmation form, as a browser reads them back."""
    form = page.split('id="confirm-form"')[1].split("</form>")[0]
    found = re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', form)
    return {name: html.unescape(value) for name, value in found}


def test_the_plan_to_apply_round_trip_carries_the_operators_text_unchanged(
    world: World,
) -> None:
    """Goal: what an operator typed reaches the repair as typed: a TAB or a line break in the
    reason was carried as the literal text ``\\x09``, and valid JSON evidence holding a TAB
    was refused when applied.

    Method: plan resolve-effect with a reason holding a TAB and a CR LF, and evidence that is
    valid JSON with TABs between its tokens; send the confirmation form's hidden fields back
    as a browser reads them: applied (303), the audit record keeps the reason as typed and
    the evidence as the JSON value it is.
    """
    reason = "the statement\tshows it\r\nline two"
    evidence = '{"statement":\t"r-17",\t"lines": [1,\t2]}'
    with signed_in(world.url, role="operator", tenant="acme") as console:
        csrf = csrf_of(console.get(f"/console/instances/{world.parked}").text)
        fields = {"csrf": csrf, "kind": "resolve-effect", "seq": "1", "applied": "yes",
                  "evidence": evidence, "resume": "no", "compensate": "yes", "status": "",
                  "result": "", "reason": reason}  # fmt: skip
        plan = console.post(f"/console/instances/{world.parked}/repairs/plan", data=fields)
        assert plan.status_code == 200, plan.text[:500]
        hidden = _hidden_fields(plan.text)
        assert (hidden["reason"], hidden["evidence"]) == (reason, evidence)
        done = console.post(f"/console/instances/{world.parked}/repairs", data=hidden)
        assert done.status_code == 303, done.text[:500]
    with Operations(world.url) as operations:
        record = operations.audit(AuditQuery(instance_id=world.parked, kind="resolve-effect"))[-1]
    assert (record.outcome, record.reason) == ("applied", reason)
    assert json.loads(record.evidence or "") == json.loads(evidence)


def test_done_shows_only_what_an_audit_record_of_the_instance_says(world: World) -> None:
    """Goal: ``?done=`` can no longer make the page show any text as a success: it takes an
    integer, and the banner is shown only for an audit record of this instance, saying what
    that record says.

    Method: ``?done=`` with words is refused (422, no banner); an audit record of another
    instance gives no banner; the record of a repair applied to this one gives its outcome,
    kind and actor.
    """
    with signed_in(world.url, role="operator", tenant="acme") as console:
        page = f"/console/instances/{world.parked}"
        words = console.get(page, params={"done": "Your account was closed"})
        assert words.status_code == 422
        assert "Your account was closed" not in words.text
        with Operations(world.url) as operations:
            others = operations.audit(AuditQuery(instance_id=world.waiting))
        foreign = console.get(page, params={"done": others[-1].audit_id}).text
        assert 'class="ok"' not in foreign
        csrf = csrf_of(console.get(page).text)
        fields = {"csrf": csrf, "kind": "resolve-effect", "seq": "1", "applied": "yes",
                  "evidence": '{"s": 1}', "resume": "no", "compensate": "yes", "status": "",
                  "result": "", "reason": "the statement"}  # fmt: skip
        plan = console.post(f"{page}/repairs/plan", data=fields)
        done = console.post(f"{page}/repairs", data=_hidden_fields(plan.text))
        shown = console.get(done.headers["location"]).text
    banner = re.search(r'<p class="ok">([^<]*)</p>', shown)
    assert banner is not None
    assert "Repair applied: audit record #" in banner.group(1)
    assert "resolve-effect by console-operator" in banner.group(1)


def _locked(url: str) -> sqlite3.Connection:
    holder = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_readyz_proves_the_journal_at_most_once_per_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: /readyz cannot be made to write a journal row per call: one proof per
    READY_PROBE_SECONDS answers every call in between, ready or not.

    Method: (SQLite, a journal another connection can lock) prove it ready; lock the journal:
    within the bound the probe still says ready, so it did not touch the journal; past the
    bound it is not ready (StorageUnavailableError); unlocked, within the bound, still not
    ready (the verdict stands); past it, ready again.
    """
    monkeypatch.setattr(limits, "SQLITE_BUSY_TIMEOUT_MS", 200)
    url = f"sqlite:///{tmp_path}/ready.db"
    clock = FakeClock(autojump=False)
    with Operations(url, migrate=None, clock=clock) as operations:
        operations.ready()
        holder = _locked(url)
        try:
            for _ in range(20):
                operations.ready()
            clock.advance(limits.READY_PROBE_SECONDS)
            with pytest.raises(StorageUnavailableError):
                operations.ready()
        finally:
            holder.rollback()
            holder.close()
        with pytest.raises(StorageUnavailableError):
            operations.ready()
        clock.advance(limits.READY_PROBE_SECONDS)
        operations.ready()


def test_readyz_leaves_the_stored_answers_alone(journal_url: str) -> None:
    """Goal: the probe's own row is all it touches: a stored Idempotency-Key answer is still
    replayed after a probe (the probe used to sweep every answer older than one second).

    Method: claim and answer a key; ten seconds later probe readiness; the same request
    replays the stored answer.
    """
    clock = FakeClock(autojump=False)
    with Operations(journal_url, migrate=None, clock=clock) as operations:
        answers = operations.answers()
        claim = answers.claim(scope="tok", key="K", request="A")
        assert isinstance(claim, Claim)
        answers.finish(claim, status=201, body="{}")
        clock.advance(10)
        operations.ready()
        assert answers.claim(scope="tok", key="K", request="A") == Replay(status=201, body="{}")
