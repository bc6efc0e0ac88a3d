"""Every face carries out a change through the one implementation: a start, a signal, a cancel
and a refused cancel through the synchronous service, the asyncio service, the HTTP API and
the command line leave the same audit records, each under the face's principal, the role
check decided the same way. On SQLite and PostgreSQL.

The command line runs in-process (``entry``), the HTTP API in-process over the same journal
(Starlette's TestClient), the asyncio service on an Engine of the journal.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import Engine
from ledgerflow.demo.order import registry, sample_order
from ledgerflow.errors import NotAuthorizedError
from ledgerflow.operators.async_service import AsyncOperations
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.service import AuditQuery, Operations, local_actor
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

Entry = Callable[..., tuple[int, str, str]]
ME = local_actor()
FACES = ("sync", "async", "http", "cli")
# Who may cancel: the account the tests run under (the CLI's and the services' principal).
POLICY = f"""
[grants]
cancelling = ["cancel"]

[actors]
"{ME}" = ["cancelling"]
"""


@pytest.fixture
def db(journal_url: str) -> str:
    with Operations(journal_url, registry=registry, migrate=None):
        pass
    return journal_url


def _prepared(db: str, face: str) -> tuple[str, str]:
    """Two instances of the face, nobody driving them: one to signal, one to cancel."""
    with Operations(db, registry=registry) as operations:
        signalled = operations.start(
            "order", key=f"{face}-signal", input=sample_order(1), actor="setup"
        )
        cancelled = operations.start(
            "order", key=f"{face}-cancel", input=sample_order(2), actor="setup"
        )
    return signalled.instance_id, cancelled.instance_id


def _through_the_services(db: str, face: str, authority: Authority) -> str:
    signalled, cancelled = _prepared(db, face)
    refused = "mallory"  # holds no grant
    if face == "sync":
        with Operations(db, registry=registry, authority=authority) as ops:
            ops.start("order", key=f"{face}-start", input=sample_order(3), actor=ME)
            ops.signal(signalled, "note", event_id="e-1", payload=1, actor=ME)
            ops.cancel(cancelled, reason="stop", actor=ME)
            with pytest.raises(NotAuthorizedError):
                ops.cancel(cancelled, reason="again", actor=refused)
        return ME

    async def run() -> None:
        async with Engine(db, registry) as engine:
            ops = AsyncOperations(engine, authority=authority)
            await ops.start("order", key=f"{face}-start", input=sample_order(3), actor=ME)
            await ops.signal(signalled, "note", event_id="e-1", payload=1, actor=ME)
            await ops.cancel(cancelled, reason="stop", actor=ME)
            with pytest.raises(NotAuthorizedError):
                await ops.cancel(cancelled, reason="again", actor=refused)

    asyncio.run(run())
    return ME


def _through_http(db: str, face: str) -> str:
    signalled, cancelled = _prepared(db, face)
    with Operations(db) as operations:
        operator = operations.tokens().create(
            name="olga", role="operator", tenant="default", created_by="test"
        )[0]
        viewer = operations.tokens().create(
            name="mallory", role="signaller", tenant="default", created_by="test"
        )[0]
    with TestClient(create_app(db, registry=registry), raise_server_exceptions=False) as client:
        auth = {"Authorization": f"Bearer {operator}"}
        answers = [
            client.post(
                "/v1/instances",
                json={
                    "workflow_name": "order",
                    "business_key": f"{face}-start",
                    "input": sample_order(3),
                },
                headers=auth,
            ),
            client.post(
                f"/v1/instances/{signalled}/signals/note",
                json={"event_id": "e-1", "payload": 1},
                headers=auth,
            ),
            client.post(f"/v1/instances/{cancelled}/cancel", json={"reason": "stop"}, headers=auth),
        ]
        assert [a.status_code for a in answers] == [201, 202, 200], [a.text for a in answers]
        refusal = client.post(
            f"/v1/instances/{cancelled}/cancel",
            json={"reason": "again"},
            headers={"Authorization": f"Bearer {viewer}"},
        )
        assert refusal.status_code == 403, refusal.text
    return "olga"


def _through_the_command_line(db: str, face: str, entry: Entry, policy: Path) -> str:
    signalled, cancelled = _prepared(db, face)
    runs = [
        entry(
            "start", "ledgerflow.demo.order:registry", "order", "--key", f"{face}-start",
            "--input", json.dumps(sample_order(3)), "--db", db,
        ),
        entry("signal", signalled, "note", "--event-id", "e-1", "--payload", "1", "--db", db),
        entry(
            "cancel", cancelled, "--reason", "stop", "--authority", str(policy), "--db", db
        ),
    ]  # fmt: skip
    assert [code for code, _, _ in runs] == [0, 0, 0], runs
    # Without the authority file the account holds no grant: refused, on the record.
    code, _, err = entry("cancel", cancelled, "--reason", "again", "--db", db)
    assert code == 1, err
    return ME


@pytest.mark.parametrize("face", FACES)
def test_each_face_leaves_the_same_record_under_its_principal(
    db: str, entry: Entry, tmp_path: Path, face: str
) -> None:
    """Goal: whichever face a change comes through, its audit record is the same: a start, a
    signal and a cancel applied under the face's principal (the cancel with the role it
    acted under), and a cancel by someone the role check refuses, on the record as refused.

    Method: the four changes through one face, on a journal of their own; the records of the
    face's principal, and the refused one, compared with what every face must leave."""
    policy = tmp_path / "authority.toml"
    policy.write_text(POLICY)
    authority = Authority.from_file(policy)
    if face == "http":
        principal, refused, role = _through_http(db, face), "mallory", "operator"
    elif face == "cli":
        principal, refused, role = _through_the_command_line(db, face, entry, policy), ME, ""
    else:
        principal, refused, role = _through_the_services(db, face, authority), "mallory", ""
    with Operations(db) as operations:
        records = operations.audit(AuditQuery(limit=500))
    applied = sorted(
        (r.kind, r.outcome) for r in records if r.actor == principal and r.outcome != "refused"
    )
    assert applied == [("cancel", "applied"), ("signal", "applied"), ("start", "applied")]
    [cancel] = [
        r for r in records if r.actor == principal and r.kind == "cancel" and r.outcome == "applied"
    ]
    # The cancel's role: the token's on the API, the grant that allowed it elsewhere.
    assert cancel.role == (role or "cancelling"), cancel
    [refusal] = [r for r in records if r.kind == "cancel" and r.outcome == "refused"]
    assert refusal.actor == refused
    assert refusal.reason == "again"
    assert refusal.refusal
