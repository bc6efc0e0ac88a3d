"""An Idempotency-Key whose server died mid-request is usable again after its bound, and the
retry does the change exactly once. Real ``ledgerflow serve`` processes, SIGKILLed at the API's
fault points (``api.after_key_claimed``: the key is claimed, nothing is done;
``api.before_answer_kept``: the change is made, its answer not kept), then restarted. On
SQLite and PostgreSQL.

Time past ``limits.IDEMPOTENCY_PENDING_SECONDS`` is made by moving the journal's claims back
by that much (what waiting would do, without a minute's wait per case): the server's clock is
the real one, and nothing else in the journal is touched.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import wait_workflows

from ledgerflow import limits
from ledgerflow.operators.service import Operations

if TYPE_CHECKING:
    # tests/web/conftest.py: imported by name only for the annotation (another folder's
    # conftest module may hold that name when several folders run together).
    from conftest import Processes

pytestmark = pytest.mark.slow


def _claims_made_earlier(url: str, seconds: float) -> None:
    """Every claim of an Idempotency-Key in the journal, as if made ``seconds`` earlier."""
    statement = "UPDATE {table} SET created_at = created_at - {seconds}"
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///").split("?")[0]) as db:
            db.execute(statement.format(table="lf_idempotency", seconds=float(seconds)))
        return
    import psycopg

    parts = urlsplit(url)
    schema = parse_qs(parts.query)["schema"][0]
    with psycopg.connect(parts._replace(query="").geturl()) as db:
        db.execute(statement.format(table=f'"{schema}".lf_idempotency', seconds=float(seconds)))


@dataclass(frozen=True)
class Call:
    """A POST the server dies in the middle of, at ``point``."""

    key: str
    point: str
    path: str
    body: dict[str, Any]


def _post(url: str, token: str, call: Call) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": call.key}
    return httpx.post(f"{url}{call.path}", json=call.body, headers=headers, timeout=30)


def _get(url: str, token: str, path: str) -> Any:
    answer = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_key_left_by_a_dead_server_is_free_after_its_bound_and_the_change_is_made_once(
    processes: Processes, journal_url: str
) -> None:
    """Goal: a server SIGKILLed while answering leaves no key stuck for the retention (24 h):
    a retry of the same request after IDEMPOTENCY_PENDING_SECONDS is carried out, and the
    change exists exactly once, whether or not it had committed before the death.

    Method: an operator token, an instance to signal and one to cancel (nobody runs them).
    For each call (a start killed before anything was done; a start, a signal and a cancel
    killed after their change committed) a server with that fault rule dies answering it.
    On a fresh server each retry is 409 LF304 at once (the first request may still be
    running for all the server knows); the start killed early made nothing, the others made
    their change. Past the bound each retry answers what the ledger holds (201 created; 200
    found, a repeat, the same cancel request), a second retry replays that answer, and each
    change is there once: one instance per business key, one delivery of the event, one
    cancel request (audited applied once, then no-op).
    """
    with Operations(journal_url, registry=wait_workflows.registry, migrate=None) as operations:
        token, _ = operations.tokens().create(
            name="olga", role="operator", tenant="default", created_by="test"
        )
        waiting = operations.start("forever", key="to-signal").instance_id
        doomed = operations.start("forever", key="to-cancel").instance_id
    calls = {
        "start-early": Call(
            key="K-start-early", point="api.after_key_claimed", path="/v1/instances",
            body={"workflow": "forever", "key": "new-early"},
        ),
        "start-late": Call(
            key="K-start-late", point="api.before_answer_kept", path="/v1/instances",
            body={"workflow": "forever", "key": "new-late"},
        ),
        "signal": Call(
            key="K-signal", point="api.before_answer_kept",
            path=f"/v1/instances/{waiting}/signals/go", body={"event_id": "e-1", "payload": 1},
        ),
        "cancel": Call(
            key="K-cancel", point="api.before_answer_kept",
            path=f"/v1/instances/{doomed}/cancel", body={"reason": "stop it"},
        ),
    }  # fmt: skip
    serve = ("--registry", "wait_workflows:registry")
    for call in calls.values():
        rule = {"point": call.point, "action": "kill", "match": {"key": call.key}}
        url, server = processes.server(*serve, db_url=journal_url, faults=[rule])
        with pytest.raises(httpx.TransportError):
            _post(url, token, call)
        assert server.wait(timeout=30) == -9, processes.tail()

    url, _ = processes.server(*serve, db_url=journal_url)
    for call in calls.values():
        stuck = _post(url, token, call)
        assert (stuck.status_code, stuck.json()["code"]) == (409, "LF304"), stuck.text
    # What the deaths left: the early start made nothing, the late calls made their change.
    key_path = "/v1/workflows/forever/keys/"
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}{key_path}new-early", headers=headers).status_code == 404
    late = _get(url, token, f"{key_path}new-late")
    assert [d["event_id"] for d in _get(url, token, f"/v1/instances/{waiting}")["inbox"]] == ["e-1"]
    assert _get(url, token, f"/v1/instances/{doomed}")["instance"]["cancel_reason"] == "stop it"

    _claims_made_earlier(journal_url, limits.IDEMPOTENCY_PENDING_SECONDS + 1)
    answers = {name: _post(url, token, call) for name, call in calls.items()}
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {"start-early": 201, "start-late": 200, "signal": 200, "cancel": 200}
    assert answers["start-early"].json()["created"] is True
    assert answers["start-late"].json()["instance"]["instance_id"] == late["instance_id"]
    assert answers["signal"].json()["outcome"] == "duplicate"
    for name, call in calls.items():
        again = _post(url, token, call)
        assert again.headers.get("Idempotent-Replayed") == "true", name
        assert (again.status_code, again.json()) == (statuses[name], answers[name].json())

    for key in ("new-early", "new-late"):
        found = _get(url, token, f"/v1/instances?key_prefix={key}")["items"]
        assert len(found) == 1, key
    inbox = _get(url, token, f"/v1/instances/{waiting}")["inbox"]
    assert [d["event_id"] for d in inbox] == ["e-1"]
    cancels = _get(url, token, f"/v1/audit?instance_id={doomed}&kind=cancel")["items"]
    assert [c["outcome"] for c in cancels] == ["applied", "no-op"]
    assert _get(url, token, f"/v1/instances/{doomed}")["instance"]["cancel_reason"] == "stop it"
