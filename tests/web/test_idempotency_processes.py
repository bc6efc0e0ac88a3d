"""A POST whose server died mid-request left nothing, and its retry with the same
Idempotency-Key does the change exactly once, with its audit record and its kept answer. Real
``ledgerflow serve`` processes, SIGKILLed at the fault points of one request's transaction
(``api.after_key_claimed``: the key is claimed, nothing is done; ``audit.before_record``: the
change is made, its audit record not yet; ``api.before_answer_kept``: the change and its
record are made, the answer not kept), then restarted. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import wait_workflows

from ledgerflow.operators.service import Operations
from ledgerflow.storage import open_store
from ledgerflow.testing import oracle

if TYPE_CHECKING:
    # tests/web/conftest.py: imported by name only for the annotation (another folder's
    # conftest module may hold that name when several folders run together).
    from conftest import Processes

pytestmark = pytest.mark.slow


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


def test_a_server_killed_while_answering_leaves_nothing_and_the_retry_is_the_first_request(
    processes: Processes, journal_url: str
) -> None:
    """Goal: a server SIGKILLed anywhere between claiming a POST's Idempotency-Key and keeping
    its answer leaves nothing behind: no claim, no change, no audit record. The claim, the
    change with its audit record and the answer are one transaction, so the retry (at once,
    no bound to wait out) is carried out as the first request, and the change, its record and
    its answer are there exactly once.

    Method: an operator token, instances to signal and to cancel (nobody runs them). For each
    call a server with one fault rule dies answering it: at ``api.after_key_claimed``, at
    ``audit.before_record`` (the change is made, its record not yet) or at
    ``api.before_answer_kept`` (change and record made, the answer not kept). After the
    deaths the journal holds none of the changes and no record of them; on a fresh server
    each retry answers as a first request would (201 created, 202 accepted, the cancel
    request), a second retry replays that answer, and each change and its record are there
    once. The oracle's ``changes_audited`` check finds every change on the record.
    """
    with Operations(journal_url, registry=wait_workflows.registry, migrate=None) as operations:
        token, _ = operations.tokens().create(
            name="olga", role="operator", tenant="default", created_by="test"
        )
        waiting = operations.start("forever", key="to-signal").instance_id
        hearing = operations.start("forever", key="to-hear").instance_id
        doomed = operations.start("forever", key="to-cancel").instance_id
    claimed, recorded, kept = (
        "api.after_key_claimed",
        "audit.before_record",
        "api.before_answer_kept",
    )
    calls = {
        "start-claimed": Call(
            key="K-start-1", point=claimed, path="/v1/instances",
            body={"workflow_name": "forever", "business_key": "new-1"},
        ),
        "start-recorded": Call(
            key="K-start-2", point=recorded, path="/v1/instances",
            body={"workflow_name": "forever", "business_key": "new-2"},
        ),
        "start-kept": Call(
            key="K-start-3", point=kept, path="/v1/instances",
            body={"workflow_name": "forever", "business_key": "new-3"},
        ),
        "signal-recorded": Call(
            key="K-signal-1", point=recorded,
            path=f"/v1/instances/{hearing}/signals/go", body={"event_id": "e-2", "payload": 2},
        ),
        "signal-kept": Call(
            key="K-signal-2", point=kept,
            path=f"/v1/instances/{waiting}/signals/go", body={"event_id": "e-1", "payload": 1},
        ),
        "cancel-kept": Call(
            key="K-cancel", point=kept,
            path=f"/v1/instances/{doomed}/cancel", body={"reason": "stop it"},
        ),
    }  # fmt: skip
    serve = ("--registry", "wait_workflows:registry")
    for call in calls.values():
        # The audit point carries no key: the one change this server is asked for dies there.
        match = {} if call.point == recorded else {"key": call.key}
        rule = {"point": call.point, "action": "kill", "match": match}
        url, server = processes.server(*serve, db_url=journal_url, faults=[rule])
        with pytest.raises(httpx.TransportError):
            _post(url, token, call)
        assert server.wait(timeout=30) == -9, processes.tail()

    url, _ = processes.server(*serve, db_url=journal_url)
    key_path = "/v1/workflows/forever/keys/"
    headers = {"Authorization": f"Bearer {token}"}
    # What the deaths left: nothing of any of the calls.
    for key in ("new-1", "new-2", "new-3"):
        assert httpx.get(f"{url}{key_path}{key}", headers=headers).status_code == 404, key
    for instance_id in (waiting, hearing):
        assert _get(url, token, f"/v1/instances/{instance_id}")["inbox"] == []
    assert _get(url, token, f"/v1/instances/{doomed}")["instance"]["cancel_reason"] is None
    changes = _get(url, token, "/v1/audit?actor=olga")["items"]
    assert changes == []

    answers = {name: _post(url, token, call) for name, call in calls.items()}
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == {
        "start-claimed": 201, "start-recorded": 201, "start-kept": 201,
        "signal-recorded": 202, "signal-kept": 202, "cancel-kept": 200,
    }  # fmt: skip
    for name in ("signal-recorded", "signal-kept"):
        assert answers[name].json()["outcome"] == "accepted", name
    for name, call in calls.items():
        again = _post(url, token, call)
        assert again.headers.get("Idempotent-Replayed") == "true", name
        assert (again.status_code, again.json()) == (statuses[name], answers[name].json())

    for key in ("new-1", "new-2", "new-3"):
        found = _get(url, token, f"/v1/instances?key_prefix={key}")["items"]
        assert len(found) == 1, key
    assert [d["event_id"] for d in _get(url, token, f"/v1/instances/{waiting}")["inbox"]] == ["e-1"]
    assert [d["event_id"] for d in _get(url, token, f"/v1/instances/{hearing}")["inbox"]] == ["e-2"]
    assert _get(url, token, f"/v1/instances/{doomed}")["instance"]["cancel_reason"] == "stop it"
    records = _get(url, token, "/v1/audit?actor=olga")["items"]
    assert sorted((r["kind"], r["outcome"]) for r in records) == sorted(
        [("start", "applied")] * 3 + [("signal", "applied")] * 2 + [("cancel", "applied")]
    )
    store = open_store(journal_url, migrate=False)
    try:
        assert oracle.changes_audited(store) == []
    finally:
        store.close()
