"""Signals over the HTTP API (``/v1``) and ``ledgerflow signal``: every answer a caller can get.

The status matrix runs the app in-process through Starlette's TestClient against a real SQLite
file, with the worker driven in-process until nothing is due, so no test waits on time. Every
request carries an API token (a signaller of the default tenant, unless a test says otherwise).
One test goes over real HTTP: ``ledgerflow serve`` and a worker, each in its own process, and
the signal sent with httpx.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import httpx
import pytest
from click.testing import CliRunner
from starlette.exceptions import StarletteDeprecationWarning
from wait_workflows import registry

from ledgerflow import Engine, InstanceStatus, SyncEngine
from ledgerflow.cli.serve import register as register_serve
from ledgerflow.cli.signals import register as register_signal
from ledgerflow.operators.service import AuditQuery, Operations, local_actor
from ledgerflow.web import create_app

with warnings.catch_warnings():
    # Starlette now prefers the httpx2 fork for its test client; plain httpx (a declared
    # dependency) works the same, and the suite turns warnings into errors.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def make_token(url: str, name: str, role: str = "signaller", tenant: str = "default") -> str:
    with Operations(url) as operations:
        text, _ = operations.tokens().create(name=name, role=role, tenant=tenant, created_by="t")
    return text


class World:
    """One SQLite journal, an engine for starting, the app over HTTP, and an in-process worker."""

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.engine = SyncEngine(self.url, registry)
        self.client = TestClient(create_app(self.url))
        self.tokens: dict[str, str] = {}

    def auth(self, name: str = "app") -> dict[str, str]:
        if name not in self.tokens:
            self.tokens[name] = make_token(self.url, name)
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def start(self, workflow: str, key: str, input: Any = None) -> str:
        return str(self.engine.start(workflow, key=key, input=input).instance_id)

    def work(self) -> None:
        async def main() -> None:
            async with Engine(self.url, registry) as engine:
                await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

        asyncio.run(main())

    def post(
        self, instance_id: str, name: str, body: Any, *, by: str = "app", **kwargs: Any
    ) -> httpx.Response:
        headers = {**self.auth(by), **kwargs.pop("headers", {})}
        return self.client.post(
            f"/v1/instances/{instance_id}/signals/{name}", json=body, headers=headers, **kwargs
        )

    def get(self, path: str, *, by: str = "app") -> httpx.Response:
        return self.client.get(path, headers=self.auth(by))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "journal.db")
    with w.client:
        yield w
    w.engine.close()


def test_accepted_then_taken_by_the_wait(world: World) -> None:
    """Goal: an event for a waiting instance is accepted (202) and resumes it.
    Method: start a wait, run the worker, POST the event, run the worker; read it back with
    GET /instances/ID."""
    instance_id = world.start("forever", "ok-1")
    world.work()
    response = world.post(instance_id, "go", {"event_id": "e1", "payload": {"n": 1}})
    assert response.status_code == 202, response.text
    assert response.json() == {
        "outcome": "accepted",
        "event_id": "e1",
        "instance_id": instance_id,
        "name": "go",
        "state": "PENDING",
        "reason": None,
    }
    world.work()
    shown = world.get(f"/v1/instances/{instance_id}").json()
    assert shown["instance"]["status"] == "SUCCEEDED"
    assert shown["instance"]["result"] == {"n": 1}
    assert [(d["event_id"], d["state"], d["payload"]) for d in shown["inbox"]] == [
        ("e1", "CONSUMED", {"n": 1})
    ]


@pytest.mark.parametrize("copies", [1, 2, 3, 4, 5])
def test_duplicates_answer_200_and_keep_one_row(world: World, copies: int) -> None:
    """Goal: the same event delivered 1..5 times changes state once.
    Method: POST it ``copies`` times (the first 202, the rest 200 duplicate), the event id
    every other one with an Idempotency-Key (replayed after its first answer); one inbox row,
    consumed once."""
    instance_id = world.start("forever", f"dup-{copies}")
    world.work()
    codes = []
    for copy in range(copies):
        if copy % 2:
            response = world.post(
                instance_id,
                "go",
                {"event_id": "ev", "payload": 7},
                headers={"Idempotency-Key": "k"},
            )
        else:
            response = world.post(instance_id, "go", {"event_id": "ev", "payload": 7})
        codes.append((response.status_code, response.json()["outcome"]))
    assert codes == [(202, "accepted")] + [(200, "duplicate")] * (copies - 1)
    world.work()
    assert world.engine.result(instance_id, timeout=1) == 7
    inbox = world.engine.detail(instance_id).inbox
    assert [(d.event_id, d.state) for d in inbox] == [("ev", "CONSUMED")]
    again = world.post(instance_id, "go", {"event_id": "ev", "payload": 7})
    assert (again.status_code, again.json()["state"]) == (200, "CONSUMED")


def test_event_id_reused_for_another_event_is_a_conflict(world: World) -> None:
    """Goal: an event id reused with another payload is not silently taken as a duplicate.
    Method: deliver e1, then e1 with a different payload: 409 event_id_reused; the inbox keeps
    the first."""
    instance_id = world.start("forever", "reuse-1")
    assert world.post(instance_id, "go", {"event_id": "e1", "payload": 1}).status_code == 202
    response = world.post(instance_id, "go", {"event_id": "e1", "payload": 2})
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "LF300"
    assert "payload" in response.json()["detail"]
    assert [d.payload for d in world.engine.detail(instance_id).inbox] == ["1"]


def test_closed_step_409_and_ended_instance_410(world: World) -> None:
    """Goal: late events are refused with the reason and change nothing.
    Method: 'two' waits for a then b; after a is taken, an event naming step 1 is 409 late;
    an event for an older run is 409; after the instance ends, any event is 410 ended; a
    repeat of a refused event stays refused (409), never 200. Each refusal is a problem
    document (LF305) that carries the delivery as the inbox keeps it."""
    instance_id = world.start("two", "late-1")
    assert world.post(instance_id, "a", {"event_id": "a1", "payload": "x"}).status_code == 202
    world.work()
    late = world.post(instance_id, "a", {"event_id": "a2", "step": 1})
    assert late.status_code == 409
    assert late.headers["content-type"] == "application/problem+json"
    assert (late.json()["code"], late.json()["refusal"]) == ("LF305", "late")
    assert late.json()["delivery"]["outcome"] == "late"
    assert late.json()["delivery"]["state"] == "REJECTED"
    assert "step 1 is closed" in late.json()["delivery"]["reason"]
    old_run = world.post(instance_id, "b", {"event_id": "b0", "run": 7})
    assert old_run.status_code == 409
    assert "run 7" in old_run.json()["delivery"]["reason"]
    repeat = world.post(instance_id, "a", {"event_id": "a2", "step": 1})
    assert (repeat.status_code, repeat.json()["delivery"]["outcome"]) == (409, "duplicate")
    assert world.engine.get(instance_id).status is InstanceStatus.WAITING

    assert world.post(instance_id, "b", {"event_id": "b1", "payload": "y"}).status_code == 202
    world.work()
    assert world.engine.result(instance_id, timeout=1) == ["x", "y"]
    ended = world.post(instance_id, "b", {"event_id": "b2", "payload": "z"})
    assert ended.status_code == 410
    assert (ended.json()["status"], ended.json()["refusal"]) == (410, "ended")
    assert "has ended" in ended.json()["delivery"]["reason"]
    states = {d.event_id: d.state for d in world.engine.detail(instance_id).inbox}
    assert states == {
        "a1": "CONSUMED",
        "a2": "REJECTED",
        "b0": "REJECTED",
        "b1": "CONSUMED",
        "b2": "REJECTED",
    }


def test_the_approver_is_the_authenticated_principal(world: World) -> None:
    """Goal: an approval counts for the principal that sent it, never for a name in its body:
    a body ``sender`` naming someone else is refused (403) before anything is kept; a principal
    the approval does not name is refused (403, kept as refused); a named approver's decision
    is taken and the result names it; each delivery is on the audit log with its principal.

    Method: the issue's attack: mallory (a signaller) posts {"sender": "bob"}: 403 LF701, the
    inbox stays empty; mallory posts as herself: 403 not-approver; bob posts (no sender): 202;
    the result names bob; the audit log holds mallory's two refusals (the spoofed sender
    too, with the name she tried) and bob's delivery.
    """
    instance_id = world.start("approve", "appr-1")
    world.work()
    spoofed = world.post(
        instance_id, "refund", {"event_id": "s", "payload": "yes", "sender": "bob"}, by="mallory"
    )
    assert spoofed.status_code == 403, spoofed.text
    assert spoofed.json()["code"] == "LF701"
    assert world.engine.detail(instance_id).inbox == []
    mallory = world.post(instance_id, "refund", {"event_id": "m", "payload": "yes"}, by="mallory")
    assert mallory.status_code == 403
    assert mallory.json()["delivery"]["outcome"] == "not-approver"
    assert "may not approve" in mallory.json()["delivery"]["reason"]
    # The detail says what happened and who may approve (issue 24: it said only the title's
    # "holds no role that allows this command").
    assert mallory.json()["detail"] == (
        "the event was refused: 'mallory' may not approve 'refund' (approvers: 'alice', 'bob')"
    )
    bob = world.post(instance_id, "refund", {"event_id": "b", "payload": "yes"}, by="bob")
    assert bob.status_code == 202
    world.work()
    assert world.engine.result(instance_id, timeout=1) == {"by": "bob", "decision": "yes"}
    audit = world.get(f"/v1/audit?instance_id={instance_id}&kind=signal").json()["items"]
    assert [(a["actor"], a["role"], a["outcome"]) for a in audit] == [
        ("mallory", "signaller", "refused"),
        ("mallory", "signaller", "refused"),
        ("bob", "signaller", "applied"),
    ]
    assert audit[0]["plan"]["sender"] == "bob"
    assert "may not speak for 'bob'" in audit[0]["refusal"]


def test_by_business_key(world: World) -> None:
    """Goal: the business-key route finds the instance in its tenant, keys with '/' included.
    Method: look the key up (200, then signal by its id: 202), the same key in another tenant
    (404), an unknown key (404)."""
    instance_id = world.start("forever", "order/42")
    found = world.get("/v1/workflows/forever/keys/order/42")
    assert found.status_code == 200, found.text
    assert found.json()["instance_id"] == instance_id
    assert world.post(instance_id, "go", {"event_id": "k1", "payload": 3}).status_code == 202
    other_tenant = world.get("/v1/workflows/forever/keys/order/42?tenant=acme")
    assert other_tenant.status_code == 404
    unknown = world.get("/v1/workflows/forever/keys/nope")
    assert unknown.status_code == 404
    assert "nope" in unknown.json()["detail"]
    world.work()
    assert world.engine.result(instance_id, timeout=1) == 3


def test_by_business_key_follows_the_naming_rule(world: World) -> None:
    """Goal: the key and tenant in the route follow the one naming rule, as the library and
    the CLI do: an NFD spelling finds the instance its NFC spelling started, an empty tenant is
    refused (422), not taken for the default one.

    Method: start with "café" in NFC; look it up by the NFD spelling (same instance); then
    with ?tenant= (422 naming the rule) and a key holding U+202E (422).
    """
    nfc = unicodedata.normalize("NFC", "café-1")
    instance_id = world.start("forever", nfc)
    nfd = quote(unicodedata.normalize("NFD", "café-1"))
    response = world.get(f"/v1/workflows/forever/keys/{nfd}")
    assert response.status_code == 200, response.text
    assert response.json()["instance_id"] == instance_id
    empty = world.get(f"/v1/workflows/forever/keys/{nfd}?tenant=")
    assert empty.status_code == 422
    hidden = world.get(f"/v1/workflows/forever/keys/{quote('ab' + chr(0x202E) + 'cd')}")
    assert hidden.status_code == 422
    assert "U+202E" in hidden.json()["detail"]


def test_unknown_instance_404(world: World) -> None:
    """Goal: an unknown instance id is 404 for delivery and for reading, as a problem.
    Method: POST and GET an id that was never started."""
    response = world.post("wf_missing", "go", {"event_id": "e"})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "LF400"
    assert response.json()["instance_id"] == "wf_missing"
    assert world.get("/v1/instances/wf_missing").status_code == 404


@pytest.mark.parametrize(
    ("content", "headers", "needle"),
    [
        (b"{not json", {}, "not valid JSON"),
        (b"\xff\xfe", {}, "not UTF-8"),
        (b"[1, 2]", {}, "valid dictionary"),
        (b"", {}, "Field required"),
        (b'{"payload": 1}', {}, "Field required"),
        (b'{"event_id": ""}', {}, "at least 1 character"),
        (b'{"event_id": 5}', {}, "valid string"),
        (b'{"event_id": "e", "step": "1"}', {}, "valid integer"),
        (b'{"event_id": "e", "step": true}', {}, "valid integer"),
        (b'{"event_id": "e", "step": 1e29}', {}, "valid integer"),
        (b'{"event_id": "e", "step": 100000000000000000000000000000}', {}, "outside 64 bits"),
        (b'{"event_id": "e", "run": 1.5}', {}, "valid integer"),
        (b'{"event_id": "e", "sender": 5}', {}, "valid string"),
        (b'{"event_id": "e", "for_step": 1}', {}, "Extra inputs are not permitted"),
        (json.dumps({"event_id": "e" * 201}).encode(), {}, "at most 200 characters"),
        (json.dumps({"event_id": "e\u202e1"}).encode(), {}, "bidirectional character"),
        (b'{"event_id": "e\\u0000x"}', {}, "NUL character"),
        (b'{"event_id": "\\ud800"}', {}, "lone surrogate"),
        (b"[" * 5000 + b"]" * 5000, {}, "the body nests 5000 levels deep"),
        (b'{"event_id": "e", "payload": NaN}', {}, "NaN is not JSON"),
        (b'{"event_id": "e"}', {"Idempotency-Key": "has space"}, "Idempotency-Key"),
    ],
)
def test_bad_input_422(world: World, content: bytes, headers: dict[str, str], needle: str) -> None:
    """Goal: unreadable input is 422 with a problem that says what is wrong, never a 500, and
    nothing is stored.
    Method: POST each malformed request to a waiting instance; the inbox stays empty."""
    instance_id = world.start("forever", "bad-1")
    response = world.client.post(
        f"/v1/instances/{instance_id}/signals/go",
        content=content,
        headers={"Content-Type": "application/json", **world.auth(), **headers},
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "LF110"
    assert needle in response.text
    assert world.engine.detail(instance_id).inbox == []


def test_health(world: World) -> None:
    """Goal: the health routes answer without a token. Method: GET /healthz and /readyz."""
    assert world.client.get("/healthz").json() == {"status": "ok"}
    assert world.client.get("/readyz").json() == {"status": "ok"}


def test_signal_command_exit_codes(world: World) -> None:
    """Goal: ``ledgerflow signal`` exits 0 for accepted and duplicate, 1 for refused with the
    reason, 2 for a payload that is not JSON; each delivery is audited against local:ACCOUNT
    (a --sender given without a token is kept as a claim, none given names no sender).
    Method: the command registered into a fresh click group, run with CliRunner."""

    @click.group()
    def group() -> None:
        """Test group."""

    register_signal(group)
    register_serve(group)
    instance_id = world.start("forever", "cli-1")
    world.work()
    runner = CliRunner()
    me = local_actor()

    def run(*args: str) -> Any:
        return runner.invoke(group, ["signal", instance_id, "go", "--db", world.url, *args])

    first = run("--event-id", "e1", "--payload", '"yes"', "--sender", "alice", "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["outcome"] == "accepted"
    again = run("--event-id", "e1", "--payload", '"yes"', "--sender", "alice")
    assert again.exit_code == 0
    assert "duplicate" in again.output
    bad = run("--event-id", "e3", "--payload", "{nope")
    assert bad.exit_code == 2
    assert "not valid JSON" in bad.output
    world.work()
    assert world.engine.result(instance_id, timeout=1) == "yes"
    ended = run("--event-id", "e4")
    assert ended.exit_code == 1
    assert "has ended" in ended.output
    inbox = {d.event_id: d.sender for d in world.engine.detail(instance_id).inbox}
    assert inbox == {"e1": f"{me} claiming alice", "e4": None}
    with Operations(world.url) as operations:
        audit = operations.audit(AuditQuery(instance_id=instance_id, kind="signal"))
    assert [(a.outcome, a.actor) for a in audit] == [
        ("applied", me),
        ("no-op", me),
        ("refused", me),
    ]


@pytest.mark.slow
def test_over_real_http(processes: Any) -> None:
    """Goal: a signal sent over real HTTP to ``ledgerflow serve`` resumes an instance that a
    worker in another process is waiting on.
    Method: start an instance, a worker process (not --until-idle) and the server process;
    once the instance is WAITING, POST the event with httpx and a token; bounded wait for
    SUCCEEDED; then SIGTERM both processes, which must exit cleanly."""
    with SyncEngine(processes.db_url, registry) as engine:
        instance_id = engine.start("forever", key="http-1").instance_id
        worker = processes.worker()
        processes.wait_until(
            lambda: engine.get(instance_id).status is InstanceStatus.WAITING,
            what="the instance to wait",
        )
        auth = {"Authorization": f"Bearer {make_token(processes.db_url, 'payments')}"}
        url, server = processes.server()
        assert httpx.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
        signal_url = f"{url}/v1/instances/{instance_id}/signals/go"
        anonymous = httpx.post(signal_url, json={"event_id": "x"}, timeout=10)
        assert anonymous.status_code == 401
        response = httpx.post(
            signal_url,
            json={"event_id": "http-e1", "payload": {"paid": 12}},
            headers=auth,
            timeout=10,
        )
        assert response.status_code == 202, response.text
        assert engine.result(instance_id, timeout=30) == {"paid": 12}
        shown = httpx.get(f"{url}/v1/instances/{instance_id}", headers=auth, timeout=10).json()
        assert shown["instance"]["status"] == "SUCCEEDED"
        assert [(d["event_id"], d["state"]) for d in shown["inbox"]] == [("http-e1", "CONSUMED")]
        late = httpx.post(signal_url, json={"event_id": "http-e2"}, headers=auth, timeout=10)
        assert late.status_code == 410
    assert processes.stop(worker) == 0, processes.tail()
    assert processes.stop(server) == 0, processes.tail()
