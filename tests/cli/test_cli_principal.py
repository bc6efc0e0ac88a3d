"""The command line is no second door (issue 22, item 7): it acts as the account that runs it,
a name typed on it is a claim that approves nothing, and no signal may take the name an
effect's completion is delivered under, on any face. On SQLite and PostgreSQL.

The real entry point runs in-process (``entry``); the HTTP API runs in-process over the same
journal (Starlette's TestClient); workers are driven in-process until nothing is due.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

import ledgerflow as lf
from ledgerflow.errors import ReservedNameError
from ledgerflow.operators.service import AuditQuery, Operations, local_actor
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

Entry = Callable[..., tuple[int, str, str]]
ME = local_actor()
registry = lf.Registry()
bank = registry.add_participant(lf.Participant("bank", deduplicates=True))


@bank.effect(classification="forward-recovery-only", completes_by_callback=600)
async def transfer(call: lf.EffectCall) -> dict[str, Any]:
    return {"accepted": call.idempotency_key}


@registry.workflow(name="pay", version=1)
async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
    return await ctx.effect(transfer, {"amount": amount})


@registry.workflow(name="refund", version=1)
async def refund(ctx: lf.WorkflowContext, amount: int) -> dict[str, Any]:
    decision = await ctx.wait_for_approval("approve", approvers=["cfo"])
    return {"by": decision.sender, "amount": amount}


def _waiting(url: str, workflow: str, key: str) -> str:
    """An instance of ``workflow`` started and driven until it waits."""

    async def main() -> str:
        async with lf.Engine(url, registry) as engine:
            started = await engine.start(workflow, key=key, input=5)
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.WAITING
            return started.instance_id

    return asyncio.run(main())


def _work(url: str) -> None:
    async def main() -> None:
        async with lf.Engine(url, registry) as engine:
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

    asyncio.run(main())


def test_no_signal_may_take_the_completion_namespace(entry: Entry, db: str) -> None:
    """Goal: a signal named ``complete:<effect id>`` (which would confirm an asynchronous
    effect with evidence its sender made up) is refused by the engine, ``ledgerflow signal``
    and the HTTP API, each with LF113, on the record and never in the inbox; the completion
    path itself still completes the effect, audited as complete-effect.

    Method: an instance waiting for its transfer's callback. The engine's signal raises
    ReservedNameError; the command exits 1 with one LF113 line; POST .../signals/complete:1
    is 422 LF113; the inbox stays empty and the effect ACCEPTED; the audit log holds the two
    refused signals (local:ACCOUNT, the token). Then POST /v1/effects/completion with the
    effect's key: 202, and the instance ends with that evidence.
    """
    instance_id = _waiting(db, "pay", "p-1")
    with Operations(db) as operations:
        [effect] = operations.detail(instance_id).effects
        token = operations.tokens().create(
            name="payments", role="signaller", tenant="default", created_by="test"
        )[0]
    name = f"complete:{effect.effect_id}"
    forged = {"applied": True, "evidence": {"forged": True}, "reason": None}
    with lf.SyncEngine(db, registry) as engine, pytest.raises(ReservedNameError):
        engine.signal(instance_id, name, event_id="forged-1", payload=forged)
    code, _, err = entry(
        "signal", instance_id, name, "--event-id", "forged-2", "--payload", json.dumps(forged),
        "--db", db,
    )  # fmt: skip
    assert code == 1
    assert err.startswith("error: [LF113] signal names starting with 'complete:' are reserved")
    assert len(err.strip().splitlines()) == 1
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(db), raise_server_exceptions=False) as client:
        # An effect id holds "/", which no route's path segment does: any name in the
        # namespace is refused alike.
        answer = client.post(
            f"/v1/instances/{instance_id}/signals/complete:{effect.seq}",
            json={"event_id": "forged-3", "payload": forged},
            headers=auth,
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "LF113"
        with Operations(db) as operations:
            detail = operations.detail(instance_id)
            assert detail.inbox == []
            assert [e.state.value for e in detail.effects] == ["ACCEPTED"]
            refused = operations.audit(AuditQuery(instance_id=instance_id, kind="signal"))
        assert [(r.actor, r.outcome) for r in refused] == [(ME, "refused"), ("payments", "refused")]
        done = client.post(
            "/v1/effects/completion",
            json={"idempotency_key": effect.idempotency_key, "applied": True,
                  "evidence": {"ref": "T-1"}},
            headers=auth,
        )  # fmt: skip
        assert done.status_code == 202, done.text
    _work(db)
    with Operations(db) as operations:
        assert operations.result(instance_id) == {"ref": "T-1"}
        completed = operations.audit(AuditQuery(instance_id=instance_id, kind="complete-effect"))
    assert [(r.actor, r.outcome) for r in completed] == [("payments", "applied")]


def test_an_approval_from_the_command_line_without_a_token_is_a_refused_claim(
    entry: Entry, db: str
) -> None:
    """Goal: without a token the command line's sender is local:ACCOUNT, and a --sender is
    only a claim, kept as 'local:ACCOUNT claiming NAME': an approval naming NAME refuses it
    (exit 1, saying a token is needed), on the record by local:ACCOUNT; the approver's own
    token approves.

    Method: a refund waiting for cfo's approval; `signal --sender cfo` with database access:
    exit 1 not-approver, the hint on stderr, the inbox keeps the claim as sender, the audit
    record's actor is local:ACCOUNT; the instance still waits. cfo's token through the API:
    accepted; the result names cfo.
    """
    instance_id = _waiting(db, "refund", "r-1")
    code, out, err = entry(
        "signal", instance_id, "approve", "--event-id", "claim-1", "--sender", "cfo", "--db", db
    )
    assert code == 1
    assert "refused: approve claim-1" in out
    assert "not-approver" in out
    assert "needs --token" in err
    with Operations(db) as operations:
        [kept] = operations.detail(instance_id).inbox
        [record] = operations.audit(AuditQuery(instance_id=instance_id, kind="signal"))
        token = operations.tokens().create(
            name="cfo", role="signaller", tenant="default", created_by="test"
        )[0]
    assert (kept.sender, kept.state) == (f"{ME} claiming cfo", "REJECTED")
    assert (record.actor, record.outcome) == (ME, "refused")
    _work(db)
    with TestClient(create_app(db), raise_server_exceptions=False) as client:
        approved = client.post(
            f"/v1/instances/{instance_id}/signals/approve",
            json={"event_id": "cfo-1"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert approved.status_code == 202, approved.text
    _work(db)
    with Operations(db) as operations:
        assert operations.result(instance_id) == {"by": "cfo", "amount": 5}
