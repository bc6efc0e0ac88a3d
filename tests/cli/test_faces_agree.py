"""Every face carries out a change through the one implementation: a start, a signal, a cancel
and a refused cancel through the synchronous service, the asyncio service, the HTTP API and
the command line leave the same audit records, each under the face's principal, the role
check decided the same way; and every operation (start, signal, cancel, an effect's callback,
a repair, a version's retirement and upgrade) through every face that offers it, compared
record by record with what the synchronous service leaves. On SQLite and PostgreSQL.

The command line runs in-process (``entry``), the HTTP API in-process over the same journal
(Starlette's TestClient), the asyncio service on an Engine of the journal.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

import lost_wakeups
from authority_files import granting
from ledgerflow import Engine
from ledgerflow.demo.order import registry, sample_order
from ledgerflow.errors import NotAuthorizedError
from ledgerflow.model.definition import Registry
from ledgerflow.model.ids import InstanceId
from ledgerflow.operators.async_service import AsyncOperations
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.service import (
    AuditQuery,
    AuditRecord,
    Operations,
    RepairKind,
    RepairRequest,
    local_actor,
)
from ledgerflow.web import create_app
from replay_shop import ORDER, run_orders, shop

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


# -- every operation through every face that offers it ------------------------------------------
#
# One row an operation: what it needs prepared (by "setup", before the face acts), how each
# face asks for it, the API role it needs and the role just below it, and whether a local actor
# needs a grant of the authority for it. Each (operation, face) runs on a journal of its own;
# the record it leaves is compared with the one the synchronous service leaves for the same
# request on another journal, field by field, and its principal and role with the face's.


@dataclass(frozen=True)
class Asked:
    """One request as each face puts it (ids filled in by the preparation)."""

    method: str  # the services' method (Operations and AsyncOperations take the same arguments)
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    http: tuple[str, dict[str, Any]] | None  # path (POST) and body; None: no HTTP face
    cli: tuple[str, ...] | None  # the command's arguments before --db; None: no CLI face


@dataclass(frozen=True)
class Operation:
    name: str
    kind: str  # the audit kind of its records
    role: str  # the API role it needs ...
    below: str  # ... and the one below, which is refused
    grant: bool  # a local actor needs a grant of the authority
    registry: Callable[[], Registry]
    prepare: Callable[[str], Coroutine[Any, Any, dict[str, str]]]
    ask: Callable[[dict[str, str], Path], Asked]


def _order_registry() -> Registry:
    return registry


async def _nothing(db: str) -> dict[str, str]:
    return {}


async def _an_order(db: str) -> dict[str, str]:
    with Operations(db, registry=registry) as operations:
        started = operations.start("order", key="o-1", input=sample_order(1), actor="setup")
    return {"instance": started.instance_id}


async def _a_payment_awaiting_its_callback(db: str) -> dict[str, str]:
    async with Engine(db, lost_wakeups.registry) as engine:
        started = await engine.start("pay", key="p-1", input=5)
        await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
        [effect] = (await engine.detail(started.instance_id)).effects
    return {"instance": started.instance_id, "key": effect.idempotency_key}


async def _an_order_in_flight(db: str) -> dict[str, str]:
    return await run_orders(db, shop("v1").registry, waiting={**ORDER, "wait": True})


def _patched_code(folder: Path) -> str:
    path = folder / "shop_patched.py"
    path.write_text('from replay_shop import shop\n\nregistry = shop("patched").registry\n')
    return f"{path}:registry"


PATCHED = shop("patched").registry.get("order", 1).fingerprint

OPERATIONS = (
    Operation(
        "start", "start", "signaller", "viewer", False, _order_registry, _nothing,
        lambda ids, folder: Asked(
            "start", ("order",), {"key": "k-1", "input": sample_order(3)},
            ("/v1/instances",
             {"workflow_name": "order", "business_key": "k-1", "input": sample_order(3)}),
            ("start", "ledgerflow.demo.order:registry", "order", "--key", "k-1",
             "--input", json.dumps(sample_order(3))),
        ),
    ),
    # The start options: a delayed start with its key's policies, and a signal-with-start.
    Operation(
        "start-options", "start", "signaller", "viewer", False, _order_registry, _nothing,
        lambda ids, folder: Asked(
            "start", ("order",),
            {"key": "k-2", "input": sample_order(3), "start_in": 600.0, "if_running": "fail",
             "if_ended": "new_run"},
            ("/v1/instances",
             {"workflow_name": "order", "business_key": "k-2", "input": sample_order(3),
              "start_in": 600.0, "if_running": "fail", "if_ended": "new_run"}),
            ("start", "ledgerflow.demo.order:registry", "order", "--key", "k-2",
             "--input", json.dumps(sample_order(3)), "--start-in", "600",
             "--if-running", "fail", "--if-ended", "new_run"),
        ),
    ),
    Operation(
        "signal-with-start", "start", "signaller", "viewer", False, _order_registry, _nothing,
        lambda ids, folder: Asked(
            "start", ("order",),
            {"key": "k-3", "input": sample_order(3), "signal": "note",
             "signal_event_id": "e-1", "signal_payload": 1, "signal_wakes": True},
            ("/v1/instances",
             {"workflow_name": "order", "business_key": "k-3", "input": sample_order(3),
              "signal": "note", "signal_event_id": "e-1", "signal_payload": 1,
              "signal_wakes": True}),
            ("start", "ledgerflow.demo.order:registry", "order", "--key", "k-3",
             "--input", json.dumps(sample_order(3)), "--signal", "note",
             "--signal-event-id", "e-1", "--signal-payload", "1", "--signal-wakes"),
        ),
    ),
    Operation(
        "signal", "signal", "signaller", "viewer", False, _order_registry, _an_order,
        lambda ids, folder: Asked(
            "signal", (ids["instance"], "note"), {"event_id": "e-1", "payload": 1},
            (f"/v1/instances/{ids['instance']}/signals/note", {"event_id": "e-1", "payload": 1}),
            ("signal", ids["instance"], "note", "--event-id", "e-1", "--payload", "1"),
        ),
    ),
    Operation(
        "cancel", "cancel", "operator", "signaller", True, _order_registry, _an_order,
        lambda ids, folder: Asked(
            "cancel", (ids["instance"],), {"reason": "stop"},
            (f"/v1/instances/{ids['instance']}/cancel", {"reason": "stop"}),
            ("cancel", ids["instance"], "--reason", "stop"),
        ),
    ),
    Operation(
        "complete", "complete-effect", "signaller", "viewer", False,
        lambda: lost_wakeups.registry, _a_payment_awaiting_its_callback,
        lambda ids, folder: Asked(
            "complete_effect", (ids["key"],), {"applied": True, "evidence": {"r": 1}},
            ("/v1/effects/completion",
             {"idempotency_key": ids["key"], "applied": True, "evidence": {"r": 1}}),
            None,
        ),
    ),
    Operation(
        "repair", "cancel", "operator", "signaller", True, _order_registry, _an_order,
        lambda ids, folder: Asked(
            "apply",
            (RepairRequest(kind=RepairKind.CANCEL, instance_id=InstanceId(ids["instance"]),
                           actor=ME, reason="repair it"),),
            {},
            (f"/v1/instances/{ids['instance']}/repairs",
             {"kind": "cancel", "reason": "repair it", "compensate": True}),
            ("repair", "cancel", ids["instance"], "--reason", "repair it"),
        ),
    ),
    Operation(
        "retire", "retire-version", "admin", "operator", True, _order_registry, _nothing,
        lambda ids, folder: Asked(
            "retire", ("order", 1), {"reason": "superseded"},
            ("/v1/versions/order/1/retire", {"reason": "superseded"}),
            ("versions", "retire", "order@1", "--reason", "superseded"),
        ),
    ),
    Operation(
        "upgrade", "upgrade", "operator", "signaller", True,
        lambda: shop("patched").registry, _an_order_in_flight,
        lambda ids, folder: Asked(
            "upgrade", (shop("patched").registry,),
            {"workflow": "order", "version": 1, "to_fingerprint": PATCHED},
            None,
            ("versions", "upgrade", "order@1", _patched_code(folder),
             "--to-fingerprint", PATCHED),
        ),
    ),
)  # fmt: skip


def _offered(operation: Operation) -> list[str]:
    asked = operation.ask({"instance": "i", "key": "k"}, Path("."))
    offered = {"sync": True, "async": True, "http": asked.http is not None}
    offered["cli"] = asked.cli is not None
    return [face for face in FACES if offered[face]]


CASES = [
    pytest.param(operation, face, id=f"{operation.name}-{face}")
    for operation in OPERATIONS
    for face in _offered(operation)
]


def _acting(asked: Asked) -> dict[str, Any]:
    """The services' keyword arguments: the request's, and the actor (a repair's request
    carries its own)."""
    return asked.kwargs if asked.method == "apply" else {**asked.kwargs, "actor": ME}


def _through_a_service(
    db: str, face: str, operation: Operation, asked: Asked, authority: Authority
) -> None:
    if face == "sync":
        with Operations(db, registry=operation.registry(), authority=authority) as ops:
            getattr(ops, asked.method)(*asked.args, **_acting(asked))
        return

    async def run() -> None:
        async with Engine(db, operation.registry()) as engine:
            ops = AsyncOperations(engine, authority=authority)
            await getattr(ops, asked.method)(*asked.args, **_acting(asked))

    asyncio.run(run())


def _principals(db: str, operation: Operation) -> tuple[str, str]:
    """Tokens of the role the operation needs (olga) and of the role below it (mallory)."""
    # A version's retirement concerns every tenant: only an admin seeing them all may.
    tenant = "*" if operation.role == "admin" else "default"
    with Operations(db) as operations:
        tokens = operations.tokens()
        allowed = tokens.create(name="olga", role=operation.role, tenant=tenant, created_by="t")
        refused = tokens.create(
            name="mallory", role=operation.below, tenant="default", created_by="t"
        )
    return allowed[0], refused[0]


def _act(
    db: str, face: str, operation: Operation, asked: Asked, folder: Path, entry: Entry
) -> tuple[str, str | None, str | None]:
    """The refused request (where the face holds it to a role), then the allowed one; the
    principal of each, and the role the allowed one is recorded under."""
    if face == "http":
        assert asked.http is not None
        allowed, refused = _principals(db, operation)
        path, body = asked.http
        app = create_app(db, registry=operation.registry())
        with TestClient(app, raise_server_exceptions=False) as client:
            no = client.post(path, json=body, headers={"Authorization": f"Bearer {refused}"})
            assert no.status_code == 403, no.text
            yes = client.post(path, json=body, headers={"Authorization": f"Bearer {allowed}"})
            assert yes.status_code < 300, yes.text
        return "olga", "mallory", operation.role
    (folder / "granted").mkdir(exist_ok=True)
    (folder / "refusing").mkdir(exist_ok=True)
    granted = granting(folder / "granted")
    refusing = granting(folder / "refusing", actors=("somebody-else",))
    if face == "cli":
        assert asked.cli is not None
        if operation.grant:
            code, _, err = entry(*asked.cli, "--db", db, "--authority", refusing)
            assert code == 1, err
        authority = ("--authority", granted) if operation.grant else ()
        code, out, err = entry(*asked.cli, "--db", db, *authority)
        assert code == 0, (out, err)
    else:
        if operation.grant:
            with pytest.raises(NotAuthorizedError):
                _through_a_service(db, face, operation, asked, Authority.from_file(Path(refusing)))
        _through_a_service(db, face, operation, asked, Authority.from_file(Path(granted)))
    return ME, (ME if operation.grant else None), ("granted" if operation.grant else None)


def _records(db: str, operation: Operation) -> list[AuditRecord]:
    with Operations(db) as operations:
        found = operations.audit(AuditQuery(kind=operation.kind, limit=500))
    return [r for r in found if r.actor != "setup"]


def _what(record: AuditRecord, *names: str) -> tuple[Any, ...]:
    """What a record says was asked and what came of it, whoever asked (``names``: the
    principals, shown as ``<principal>`` where a record quotes them)."""
    text = json.dumps([record.target, record.reason, json.loads(record.plan or "null")])
    for name in names:
        text = text.replace(json.dumps(name)[1:-1], "<principal>")
    return (record.kind, record.instance_id, record.outcome, *json.loads(text))


def _sent_by_the_principal(what: tuple[Any, ...]) -> tuple[Any, ...]:
    """A signal's record as the API leaves it: the principal speaks as itself, so it is the
    event's sender (locally no sender is claimed unless asked for)."""
    *head, plan = what
    return (*head, {**plan, "sender": "<principal>"})


def _journal(folder: Path) -> str:
    url = f"sqlite:///{folder / 'reference.db'}"
    with Operations(url, migrate=None):
        pass
    return url


@pytest.mark.parametrize(("operation", "face"), CASES)
def test_every_operation_is_one_implementation_whichever_face_asks(
    db: str, entry: Entry, tmp_path: Path, operation: Operation, face: str
) -> None:
    """Goal: every change from outside (start, signal, cancel, an effect's callback, a repair,
    a version's retirement and upgrade) goes through one implementation, whichever face asks:
    the same audit record under the face's principal, with the role it acted under, and the
    same refusal, on the record, for a principal whose role is too low (on the API: the role
    below the route's; locally: no grant of the authority, where the operation needs one).

    Method: the operation's preparation on the face's journal, the request refused and then
    allowed through the face; its records compared with those the synchronous service leaves
    for the same request on a journal of its own (the reference)."""
    reference = tmp_path / "reference"
    reference.mkdir()
    expected_url = _journal(reference)
    expected_ids = asyncio.run(operation.prepare(expected_url))
    _act(expected_url, "sync", operation, operation.ask(expected_ids, reference), reference, entry)
    expected = _records(expected_url, operation)

    ids = asyncio.run(operation.prepare(db))
    assert ids == expected_ids  # the same instances, on both journals
    principal, refused, role = _act(db, face, operation, operation.ask(ids, tmp_path), tmp_path,
                                    entry)  # fmt: skip
    records = _records(db, operation)

    applied = [r for r in records if r.outcome != "refused"]
    expected_applied = [_what(r, ME) for r in expected if r.outcome != "refused"]
    if face == "http" and operation.kind == "signal":
        expected_applied = [_sent_by_the_principal(w) for w in expected_applied]
    assert [_what(r, principal) for r in applied] == expected_applied
    assert applied
    assert {(r.actor, r.role) for r in applied} == {(principal, role)}
    refusals = [r for r in records if r.outcome == "refused"]
    if refused is None:
        assert refusals == []  # a local actor needs no grant for this operation
        return
    [refusal] = refusals
    assert (refusal.actor, refusal.role) == (refused, operation.below if face == "http" else None)
    assert refusal.refusal
    if operation.grant:
        [reference_refusal] = [r for r in expected if r.outcome == "refused"]
        assert _what(refusal, refused) == _what(reference_refusal, ME)
    else:
        # Only the API holds a principal to a role for it: on the record of the instance
        # asked about (a start refused names none).
        instance = None if operation.kind == "start" else applied[0].instance_id
        assert (refusal.kind, refusal.instance_id) == (operation.kind, instance)
