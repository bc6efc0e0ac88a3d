"""``ledgerflow flow`` (set, limits, throttled, remove) on a SQLite journal: each change is
audited against the local actor, and a THROTTLED attempt is listed with how long it waited."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

import ledgerflow as lf
from conditions import until
from ledgerflow.cli.main import cli
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.flow import AdmissionState
from ledgerflow.storage import open_store


def test_set_list_throttled_and_remove_are_audited(tmp_path: Path) -> None:
    """Goal: a limit set from the command line is the one listed (and the one admissions
    use); an attempt it holds back is listed as throttled; set and remove are audited; a bad
    limit is refused with no change. Method: run the commands through click on one journal,
    and a worker driving two effects of an instance under the limit (one each 10 s)."""
    runner = CliRunner()
    db = f"sqlite:///{tmp_path / 'flow.db'}"
    open_store(db).close()
    bad = runner.invoke(cli, ["flow", "set", "api.send", "--rate", "0", "--db", db])
    assert bad.exit_code != 0
    done = runner.invoke(cli, ["flow", "set", "api.send", "--rate", "0.1", "--per", "tenant",
                               "--reason", "quota", "--db", db])  # fmt: skip
    assert done.exit_code == 0, done.output
    listed = json.loads(runner.invoke(cli, ["flow", "limits", "--db", db, "--json"]).output)
    assert listed["items"] == [{"scope": "effect:api.send", "concurrency_max": None,
                                "rate_per_second": 0.1, "burst": 1, "per": "tenant",
                                "fair_by": None, "weights": {}}]  # fmt: skip
    empty = runner.invoke(cli, ["flow", "throttled", "--db", db])
    assert "no effect is throttled" in empty.output
    asyncio.run(_hold_one_back(db))
    waiting = json.loads(runner.invoke(cli, ["flow", "throttled", "--db", db, "--json"]).output)
    assert [(w["attempt"], w["reason"], w["state"], w["priority"]) for w in waiting["items"]] == [
        (1, "rate", "THROTTLED", 3)
    ]
    table = runner.invoke(cli, ["flow", "throttled", "--db", db]).output
    assert "priority" in table
    assert "fair key" in table
    assert waiting["items"][0]["effect_id"].endswith("/s2/effect")
    removed = runner.invoke(cli, ["flow", "remove", "api.send", "--db", db])
    assert "removed api.send" in removed.output
    again = runner.invoke(cli, ["flow", "remove", "api.send", "--db", db])
    assert "had no limit" in again.output
    store = open_store(db)
    try:
        audit = store.audit_records(AuditQuery())
        assert [(a.kind, a.outcome, a.target) for a in audit] == [
            ("flow-limit-set", "applied", "effect:api.send"),
            ("flow-limit-remove", "applied", "effect:api.send"),
            ("flow-limit-remove", "no-op", "effect:api.send"),
        ]
    finally:
        store.close()


async def _hold_one_back(db: str) -> None:
    """Two effects of the limited operation (one each 10 s): the first is sent, the second
    waits THROTTLED; the worker is stopped while it waits."""
    registry = lf.Registry()
    api = registry.add_participant(lf.Participant("api"))

    @api.effect(classification="compensatable")
    async def send(call: lf.EffectCall) -> int:
        return 1

    @registry.workflow(name="two", version=1)
    async def two(ctx: lf.WorkflowContext, _: None) -> int:
        first: int = await ctx.effect(send, {"n": 1})
        second: int = await ctx.effect(send, {"n": 2})
        return first + second

    async with lf.Engine(db, registry) as engine:
        started = await engine.start("two", key="t", input=None)
        worker = engine.worker(poll_seconds=0.01)
        running = asyncio.create_task(worker.run())
        try:
            await until(
                lambda: engine.store.flow_admissions(state=AdmissionState.THROTTLED),
                what="a throttled attempt",
            )
        finally:
            worker.stop()
            await running
        assert (await engine.get(started.instance_id)).status is not lf.InstanceStatus.SUCCEEDED


def test_fairness_is_set_and_shown(tmp_path: Path) -> None:
    """--fair-by and --weight set a fair limit, listed with its weights; a weight not given as
    KEY=NUMBER is refused in one line, with no change."""
    runner = CliRunner()
    db = f"sqlite:///{tmp_path / 'flow.db'}"
    open_store(db).close()
    bad = runner.invoke(cli, ["flow", "set", "api.send", "--rate", "5", "--fair-by", "tenant",
                              "--weight", "acme", "--db", db])  # fmt: skip
    assert bad.exit_code != 0
    assert "KEY=NUMBER" in str(bad.exception)
    weights = ["--weight", "acme=3", "--weight", "small=0.5"]
    done = runner.invoke(cli, ["flow", "set", "api.send", "--rate", "5", "--fair-by", "tenant",
                               *weights, "--db", db])  # fmt: skip
    assert done.exit_code == 0, done.output
    listed = json.loads(runner.invoke(cli, ["flow", "limits", "--db", db, "--json"]).output)
    [limit] = listed["items"]
    assert (limit["fair_by"], limit["weights"]) == ("tenant", {"acme": 3.0, "small": 0.5})
    shown = runner.invoke(cli, ["flow", "limits", "--db", db]).output
    assert "acme=3" in shown
    assert "small=0.5" in shown
