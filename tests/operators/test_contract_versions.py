"""Participant contract versions in replay and migration, on each backend.

A payment is charged under the bank's contract 1 (``{"amount": n}``) by real workers, and waits.
Then the bank's declaration moves to contract 2 (``{"amount_cents": n}``). Replaying the
history against that code reports a ``contract`` divergence at the charge's position (the
operators' service, the ``ledgerflow replay`` command in text and JSON, and an exported
history through ``ledgerflow.testing.replay_history``). A migration to v2 whose plan maps the
old contract's payload replays clean and moves the instance (the effect's id, key and recorded
payload kept); a plan without the mapping leaves it pinned.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ledgerflow as lf
from authority_files import granting
from contract_shop import ORDER, payments
from ledgerflow.cli.main import cli
from ledgerflow.errors import PayloadError
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.operators.service import MigrationPlan, Operations, local_actor
from ledgerflow.testing import replay_history

MAPPING = {
    "participant": "bank",
    "operation": "charge",
    "from": 1,
    "to": 2,
    "rename": {"amount": "amount_cents"},
}


@pytest.fixture(autouse=True)
def movers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The actors these tests move instances as hold a role that allows it (version moves
    need one, like repairs: the authority file of LEDGERFLOW_AUTHORITY)."""
    policy = granting(tmp_path, "upgrade", "migrate", actors=("alice", local_actor()))
    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", policy)


@pytest.fixture
def charged(journal_url: str) -> str:
    """One payment charged under contract 1, waiting for ``go``."""

    async def main() -> str:
        async with lf.Engine(journal_url, payments(1).registry) as engine:
            instance_id = (await engine.start("pay", key="p-1", input=ORDER)).instance_id
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            return instance_id

    return asyncio.run(main())


def _plan(*contracts: dict[str, Any]) -> MigrationPlan:
    return MigrationPlan.from_document(
        {"workflow": "pay", "from_version": 1, "to_version": 2, "contracts": list(contracts)}
    )


def test_a_contract_mismatch_is_reported_at_the_effects_position(
    journal_url: str, charged: str, tmp_path: Path
) -> None:
    """Goal: a history whose effect was recorded under another contract version than the code
    declares is divergent, of kind ``contract``, at that effect's position, wherever it is
    replayed; the same code under the same contract replays clean.

    Method: replay through the service against contract 1 (clean) and contract 2 (contract at
    position 2, naming both versions); ``ledgerflow replay --json`` and the text report;
    ``ledgerflow export`` then ``replay_history`` on the file. The participant saw no call.
    """
    same, changed = payments(1), payments(2)
    with Operations(journal_url) as operations:
        [clean] = operations.replay(same.registry)
        [verdict] = operations.replay(changed.registry)
    assert clean.compatible, clean
    assert (verdict.compatible, verdict.kind, verdict.position) == (False, "contract", 2)
    assert verdict.replayed == 1
    assert verdict.holds == "effect bank.charge under contract 1"
    assert verdict.asks == "effect bank.charge under contract 2"
    assert "recorded under contract version '1'; the code declares '2'" in (verdict.reason or "")
    assert same.calls == changed.calls == []

    runner = CliRunner()
    shown = runner.invoke(cli, ["replay", "contract_shop:registry", "--db", journal_url, "--json"])
    assert shown.exit_code == 1, shown.output
    [item] = json.loads(shown.output)["items"]
    assert (item["kind"], item["position"], item["instance_id"]) == ("contract", 2, charged)
    text = runner.invoke(cli, ["replay", "contract_shop:registry", "--db", journal_url])
    assert text.exit_code == 1
    assert "contract" in text.output
    assert "0 compatible, 1 divergent" in text.output

    exported = runner.invoke(cli, ["export", charged, "--db", journal_url])
    assert exported.exit_code == 0, exported.output
    history = tmp_path / "p-1.json"
    history.write_text(exported.output)
    from_file = replay_history(changed.registry, history)
    assert (from_file.kind, from_file.position) == ("contract", 2)
    assert replay_history(same.registry, history).compatible


def test_a_plan_that_maps_the_old_contract_moves_the_instance(
    journal_url: str, charged: str
) -> None:
    """Goal: a migration plan that declares how contract 1's payload maps to contract 2 makes
    the v2 code's replay clean; the move keeps the effect's id, key and recorded payload (the
    evidence of what the bank took), records the mapping in the audit record, and the
    instance finishes on v2 without charging again.

    Method: dry run (would-move), then migrate with the mapping; the charge's step input is
    the mapped payload, its effect is under contract 2 with its original id, key and payload;
    the audit plan holds the mapping and the recorded input; a replay of the moved instance is
    clean; ``go`` is delivered and a worker with the new code finishes it, the bank called
    once in all.
    """
    old, new = payments(1), payments(2)
    with Operations(journal_url) as operations:
        [before] = operations.detail(charged).effects
        dry = operations.migrate_instances(
            new.registry, _plan(MAPPING), actor="alice", dry_run=True
        )
        assert [o.outcome for o in dry.outcomes] == ["would-move"]
        assert operations.detail(charged).instance.workflow_version == 1
        report = operations.migrate_instances(new.registry, _plan(MAPPING), actor="alice")
        detail = operations.detail(charged)
        [audit] = operations.audit(AuditQuery(kind="migrate", instance_id=charged))
        [replayed] = operations.replay(new.registry)
    assert [o.outcome for o in report.outcomes] == ["moved"]
    assert detail.instance.workflow_version == 2
    [step] = [s for s in detail.steps if s.seq == 2]
    assert json.loads(step.input or "null") == {"amount_cents": 7}
    [effect] = detail.effects
    assert (effect.effect_id, effect.idempotency_key) == (before.effect_id, before.idempotency_key)
    assert effect.payload == before.payload
    assert json.loads(effect.payload or "null") == {"amount": 7}
    assert (before.contract_version, effect.contract_version) == ("1", "2")
    [mapped] = json.loads(audit.plan or "{}")["contracts"]
    assert mapped["mapping"] == {**MAPPING, "from": "1", "to": "2"}
    assert json.loads(mapped["recorded_input"]) == {"amount": 7}
    assert mapped["idempotency_key"] == before.idempotency_key
    assert replayed.compatible, replayed

    async def finish() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, new.registry) as engine:
            await engine.signal(charged, "go", event_id="go-1")
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            return await engine.get(charged)

    ended = asyncio.run(finish())
    assert ended.status is lf.InstanceStatus.SUCCEEDED, ended.reason
    assert ended.result_value == "charged 7"
    assert len(old.calls) == 0  # made by the fixture's own registry, not this one
    assert new.calls == []


def test_a_plan_without_the_mapping_leaves_the_instance_pinned(
    journal_url: str, charged: str
) -> None:
    """Goal: without a mapping for the old contract the migration is not proven: the instance
    stays pinned to v1 and is listed with its ``contract`` divergence; a mapping for another
    contract version changes nothing.

    Method: migrate with no contracts, then with a mapping from contract 3; each reports the
    instance diverged (kind contract, position 2); the instance is still v1 with its
    fingerprint; each migration that left it is on the record as refused, none as applied.
    """
    new = payments(2)
    other = {**MAPPING, "from": 3}
    with Operations(journal_url) as operations:
        pinned = operations.detail(charged).instance
        for plan in (_plan(), _plan(other)):
            report = operations.migrate_instances(new.registry, plan, actor="alice")
            [outcome] = report.outcomes
            assert outcome.outcome == "diverged"
            assert outcome.verdict is not None
            assert (outcome.verdict.kind, outcome.verdict.position) == ("contract", 2)
        after = operations.detail(charged).instance
        audit = operations.audit(AuditQuery(kind="migrate", instance_id=charged))
    assert (after.workflow_version, after.fingerprint) == (1, pinned.fingerprint)
    assert [(a.outcome, a.actor) for a in audit] == [("refused", "alice")] * 2
    assert all("diverged at position 2 (contract)" in (a.refusal or "") for a in audit)


def test_a_plan_refuses_bad_contract_mappings() -> None:
    """Goal: a malformed contract mapping is refused with a clear error, not half-applied."""
    with pytest.raises(PayloadError, match="not a migration plan"):
        _plan({**MAPPING, "rename": {"amount": 3}})
    with pytest.raises(PayloadError, match="mapped twice"):
        _plan(MAPPING, MAPPING)
    with pytest.raises(PayloadError, match="not a migration plan"):
        _plan({"participant": "bank"})


def test_the_documented_toml_plan_migrates_from_the_command_line(
    journal_url: str, charged: str, tmp_path: Path
) -> None:
    """Goal: the plan of docs/versioning.md, as a TOML file, is read by ``ledgerflow
    versions migrate`` and moves the instance (after a dry run that moves nothing).

    Method: the documented plan (``[[contracts]]`` with a rename) in plan.toml; a dry run
    reports the instance would move, leaving it on v1; the run moves it to v2.
    """
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'workflow = "pay"\nfrom_version = 1\nto_version = 2\n\n[[contracts]]\n'
        'participant = "bank"\noperation = "charge"\nfrom = 1\nto = 2\n'
        'rename = { amount = "amount_cents" }\n'
    )
    args = ["versions", "migrate", "pay@1", "contract_shop:registry", "--to", "2"]
    args += ["--plan", str(plan), "--db", journal_url, "--json"]
    runner = CliRunner()
    dry = runner.invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert [o["outcome"] for o in json.loads(dry.output)["outcomes"]] == ["would-move"]
    with Operations(journal_url) as operations:
        assert operations.detail(charged).instance.workflow_version == 1
    done = runner.invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert [o["outcome"] for o in json.loads(done.output)["outcomes"]] == ["moved"]
    with Operations(journal_url) as operations:
        assert operations.detail(charged).instance.workflow_version == 2
