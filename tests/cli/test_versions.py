"""Definition versions: what each holds, retiring one with evidence, and a retired version
refusing starts on every face; participant contract versions recorded and shown. On SQLite and
PostgreSQL.

A version is retired only while no instance that has not ended for good is pinned to it; the
retirement's audit record holds the evidence (instances per status, the last one ended, who and
when). A retired version starts nothing: the engine, ``ledgerflow start`` and ``POST
/v1/instances`` all refuse with LF106, while a business key that already has an instance still
answers with it.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.exceptions import StarletteDeprecationWarning

import ledgerflow as lf
from authority_files import granting
from ledgerflow.cli.main import cli
from ledgerflow.errors import NotAuthorizedError, RegistrationError, VersionRetiredError
from ledgerflow.model.codec import JSON
from ledgerflow.model.contracts import contract_mismatches
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.service import ApiRole, AuditQuery, Operations, local_actor
from ledgerflow.runtime.core import EngineCore
from ledgerflow.storage import open_store
from ledgerflow.web import create_app

# The `entry` fixture (tests/cli/conftest.py): the real entry point's exit code, stdout, stderr.
# Who runs the commands: the account the tests run under, as the command line names it.
ME = local_actor()
Entry = Callable[..., tuple[int, str, str]]

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

registry = lf.Registry()
shop = registry.add_participant(lf.Participant("shop", deduplicates=True))
CHARGED: list[str] = []


@shop.effect(classification="compensatable", compensation="refund", contract_version=2)
async def charge(call: lf.EffectCall) -> dict[str, Any]:
    CHARGED.append(call.idempotency_key)
    return {"charged": call.payload}


@shop.compensation("refund")
async def refund(call: lf.EffectCall) -> dict[str, Any]:
    return {"refunded": call.original_key}


@registry.workflow(name="order", version=1)
async def order_v1(ctx: lf.WorkflowContext, amount: int) -> int:
    await ctx.effect(charge, {"amount": amount})
    await ctx.wait_for("shipped")
    return amount


@registry.workflow(name="order", version=2)
async def order_v2(ctx: lf.WorkflowContext, amount: int) -> int:
    await ctx.effect(charge, {"amount": amount, "currency": "EUR"})
    return amount


def _drain(url: str) -> None:
    async def run() -> None:
        async with lf.Engine(url, registry) as engine:
            await engine.worker(lease_seconds=2, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(run())


@pytest.fixture
def policy(tmp_path: Path) -> str:
    """An authority file that lets who runs the command (and alice, in code) retire."""
    return granting(tmp_path, "retire-version", actors=(ME, "alice"))


def _retire(entry: Entry, url: str, target: str, policy: str, *extra: str) -> tuple[int, str, str]:
    return entry("versions", "retire", target, "--db", url, "--authority", policy, *extra)


def test_retire_refuses_while_instances_are_in_flight_then_records_its_evidence(
    journal_url: str, entry: Entry, policy: str
) -> None:
    """Goal: retiring is refused while an instance that has not ended is pinned to the
    version (saying how many and the oldest, on the record too), and once none is, it is
    retired with its evidence on the audit log; a repeat is a no-op that says so.

    Method: start two order@1 instances (they wait for "shipped") and one order@2 (it ends).
    `versions` lists order@1 with 2 in flight and the oldest; retiring order@1 is refused
    (LF702, "2 instance(s)", the oldest's id) and audited as refused. Signal both; once they
    ended, retiring succeeds: `versions` says retired, the audit record (kind retire-version,
    actor local:ACCOUNT, with the role the authority file gave) holds SUCCEEDED 2 and the last
    ended instance. Retiring again: no-op. Under the built-in policy (no role) it is refused
    before anything is read, on the record too.
    """
    with Operations(journal_url, registry=registry, migrate=None) as ops:
        first = ops.start("order", key="a", input=1, version=1).instance_id
        second = ops.start("order", key="b", input=2, version=1).instance_id
        ops.start("order", key="c", input=3, version=2)
    _drain(journal_url)
    code, out, err = entry("versions", "--json", "--db", journal_url)
    assert code == 0, err
    rows = {(r["workflow_name"], r["workflow_version"]): r for r in json.loads(out)["items"]}
    assert rows["order", 1]["statuses"] == {"WAITING": 2}
    assert (rows["order", 1]["in_flight"], rows["order", 1]["oldest_in_flight_id"]) == (2, first)
    assert rows["order", 1]["retired"] is False
    assert rows["order", 1]["served_by"] == []
    assert rows["order", 2]["statuses"] == {"SUCCEEDED": 1}
    assert rows["order", 2]["in_flight"] == 0

    code, _, refused = _retire(entry, journal_url, "order@1", policy, "--reason", "v2 is live")
    assert code == 1
    assert refused.startswith("error: [LF702] order@1 cannot be retired")
    assert "2 instance(s)" in refused
    assert first in refused
    code, _, unauthorised = entry("versions", "retire", "order@1", "--db", journal_url)
    assert code == 1
    assert unauthorised.startswith(f"error: [LF701] {ME} holds no grant that allows retire")
    with Operations(journal_url) as ops:
        records = ops.audit(AuditQuery(kind="retire-version"))
        assert [(r.outcome, r.actor, r.target, r.role) for r in records] == [
            ("refused", ME, "order@1", "granted"),
            ("refused", ME, "order@1", None),
        ]
        for instance in (first, second):
            ops.signal(instance, "shipped", event_id=f"ship-{instance}")
    _drain(journal_url)

    code, done, err = _retire(
        entry, journal_url, "order@1", policy, "--reason", "v2 is live", "--json"
    )
    assert code == 0, err
    answer = json.loads(done)
    assert answer["outcome"] == "applied"
    assert answer["statuses"] == {"SUCCEEDED": 2}
    with Operations(journal_url) as ops:
        applied = ops.audit(AuditQuery(kind="retire-version"))[-1]
        [summary] = [v for v in ops.versions() if v.workflow_version == 1]
    assert (applied.outcome, applied.actor, applied.reason) == ("applied", ME, "v2 is live")
    assert applied.role == "granted"
    assert applied.audit_id == answer["audit_id"]
    evidence = json.loads(applied.evidence or "{}")
    assert evidence["statuses"] == {"SUCCEEDED": 2}
    assert evidence["in_flight"] == 0
    assert evidence["last_ended_id"] in (first, second)
    assert evidence["last_ended_status"] == "SUCCEEDED"
    assert evidence["last_ended_at"] > 0
    assert (summary.retired, summary.retired_by) == (True, ME)

    code, out, err = entry("audit", "--kind", "retire-version", "--json", "--db", journal_url)
    assert code == 0, err
    listed_audit = json.loads(out)["items"]
    assert [a["outcome"] for a in listed_audit] == ["refused", "refused", "applied"]
    assert listed_audit[2]["evidence"]["statuses"] == {"SUCCEEDED": 2}
    code, again, err = _retire(entry, journal_url, "order@1", policy)
    assert code == 0, err
    assert again.startswith(f"no-op: order@1 was already retired by {ME}")


def test_a_retired_version_refuses_starts_on_every_face(journal_url: str, entry: Entry) -> None:
    """Goal: once retired, a version starts nothing, whoever asks: the engine, the command
    line (one line, LF106) and the HTTP API (a 409 problem); a business key that already has
    an instance still answers with it; the current version still starts.

    Method: start order@1 key "old" and let it end; retire order@1 (an all-tenant admin over
    HTTP). Then engine.start(version=1) raises VersionRetiredError; `ledgerflow start
    --version 1` exits 1 with one line; POST /v1/instances is 409 LF106 and nothing was
    inserted; starting "old" again returns it; order@2 starts.
    """
    with Operations(journal_url, registry=registry, migrate=None) as ops:
        old = ops.start("order", key="old", input=1, version=1).instance_id
        ops.signal(old, "shipped", event_id="ship-old")
        admin = ops.tokens().create(
            name="root", role=ApiRole.ADMIN.value, tenant="*", created_by="t"
        )[0]
        viewer = ops.tokens().create(name="vic", role="viewer", tenant="default", created_by="t")[0]
    _drain(journal_url)

    with TestClient(
        create_app(journal_url, registry=registry), raise_server_exceptions=False
    ) as client:

        def call(method: str, path: str, token: str, body: Any = None) -> Any:
            headers = {"Authorization": f"Bearer {token}"}
            return client.request(method, path, headers=headers, json=body)

        path = "/v1/versions/order/1/retire"
        assert call("POST", path, viewer, {"reason": "done"}).status_code == 403
        retired = call("POST", path, admin, {"reason": "done"})
        assert retired.status_code == 200, retired.text
        assert retired.json()["outcome"] == "applied"
        assert retired.json()["evidence"]["statuses"] == {"SUCCEEDED": 1}
        versions = call("GET", "/v1/versions", viewer).json()["items"]
        assert [(v["workflow_version"], v["retired"]) for v in versions] == [(1, True)]

        refused = call(
            "POST",
            "/v1/instances",
            admin,
            {"workflow": "order", "key": "new", "input": 1, "version": 1},
        )
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["code"] == "LF106"
        same = call(
            "POST",
            "/v1/instances",
            admin,
            {"workflow": "order", "key": "old", "input": 1, "version": 1},
        )
        assert same.status_code == 200, same.text
        assert same.json()["instance"]["instance_id"] == old

    async def engine_start() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            with pytest.raises(VersionRetiredError) as raised:
                await engine.start("order", key="new", input=1, version=1)
            assert (raised.value.workflow, raised.value.version) == ("order", 1)
            assert (await engine.start("order", key="new", input=1)).instance.workflow_version == 2

    asyncio.run(engine_start())
    with lf.SyncEngine(journal_url, registry) as engine, pytest.raises(VersionRetiredError):
        engine.start("order", key="newer", input=1, version=1)

    code, _, err = entry(
        "start", f"{__name__}:registry", "order", "--key", "cli", "--input", "1",
        "--version", "1", "--db", journal_url,
    )  # fmt: skip
    assert code == 1
    assert err.startswith("error: [LF106] order v1 is retired")
    assert len(err.strip().splitlines()) == 1
    with Operations(journal_url) as ops:
        keys = sorted(i.business_key for i in ops.list())
    assert keys == ["new", "old"]


def test_retire_is_refused_to_a_one_tenant_admin_and_for_a_bad_target(
    journal_url: str, entry: Entry, policy: str
) -> None:
    """Goal: retiring concerns every tenant's instances, so only an admin that sees them all
    may (refused on the record); a target that is not WORKFLOW@N is a one-line error.

    Method: a tenant-scoped admin's retire is 403 LF701, recorded as refused with her name;
    `versions retire order` (no @N) and `order@0` exit 1 naming the form.
    """
    with Operations(journal_url, registry=registry, migrate=None) as ops:
        local = ops.tokens().create(name="ann", role="admin", tenant="acme", created_by="t")[0]
        with pytest.raises(NotAuthorizedError):
            ops.acting_as(ops.tokens().authenticate(local)).retire("order", 1, reason="x")
        records = ops.audit(AuditQuery(kind="retire-version"))
        assert [(r.outcome, r.actor, r.role) for r in records] == [("refused", "ann", "admin")]
    for target in ("order", "order@0", "@1"):
        code, _, bad = _retire(entry, journal_url, target, policy)
        assert code == 1
        assert "WORKFLOW@N" in bad


def test_retiring_holds_back_a_racing_start(journal_url: str, policy: str) -> None:
    """Goal: the refusal of a retired version's start is made by the journal's insert, not by
    a check before it: a start prepared before the retirement (as a racing one would be) is
    still refused.

    Method: prepare order@1's new instance with the engine core (as engine.start does), retire
    order@1, then insert the prepared instance through the store: VersionRetiredError, and
    the journal holds no instance.
    """
    store = open_store(journal_url)
    try:
        core = EngineCore(store, registry, JSON)
        _, new = core.prepare("order", key="race", input=1, version=1, tenant=None)
        with Operations(journal_url, authority=Authority.from_file(policy)) as ops:
            ops.retire("order", 1, reason="race", actor="alice")
        with pytest.raises(VersionRetiredError):
            core.start(new, now=1.0)
    finally:
        store.close()
    with Operations(journal_url) as ops:
        assert ops.list() == []


def test_contract_versions_are_recorded_and_shown(journal_url: str) -> None:
    """Goal: an effect's declared contract version is recorded with it, shown by `ledgerflow
    show`, and a history recorded under another contract version is listed as a mismatch.

    Method: run order@2 (its charge declares contract 2): the effect ledger holds "2"; `show`
    prints "shop.charge (contract 2)" and --json has contract_version "2". Against a registry
    that declares contract 3 for charge, contract_mismatches names step 1, recorded "2",
    declared "3"; against the same registry, none.
    """
    with Operations(journal_url, registry=registry, migrate=None) as ops:
        started = ops.start("order", key="k", input=5, version=2)
    _drain(journal_url)
    with Operations(journal_url) as ops:
        detail = ops.detail(started.instance_id)
    assert [(e.operation, e.contract_version) for e in detail.effects] == [("charge", "2")]
    shown = CliRunner().invoke(cli, ["show", started.instance_id, "--db", journal_url])
    assert shown.exit_code == 0, shown.output
    assert "shop.charge (contract 2)" in shown.output
    as_json = CliRunner().invoke(cli, ["show", started.instance_id, "--db", journal_url, "--json"])
    assert json.loads(as_json.output)["effects"][0]["contract_version"] == "2"

    newer = lf.Registry()
    newer_shop = newer.add_participant(lf.Participant("shop", deduplicates=True))
    newer_shop.effect("charge", classification="compensatable", contract_version=3)(charge.function)
    [mismatch] = contract_mismatches(detail.effects, newer)
    assert (mismatch.seq, mismatch.recorded, mismatch.declared) == (1, "2", "3")
    assert "recorded under contract version '2'; the code declares '3'" in mismatch.describe()
    assert contract_mismatches(detail.effects, registry) == []
    with pytest.raises(RegistrationError, match="contract_version"):
        newer_shop.effect("other", classification="reversible", contract_version=" 1")(
            charge.function
        )
