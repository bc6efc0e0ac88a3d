"""Replay-proven upgrades and declared migrations of in-flight instances, on each backend.

Instances are made by real workers with ``v1`` code (``tests/replay_shop.py``); the operators'
service moves them. A dry run leaves the whole database as it was; a move is one transaction
with its audit record; keys and effect ids stay what they were; refusals are reported.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import breakages
import ledgerflow as lf
from authority_files import granting
from database_dump import dump
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.model.ids import WorkerId
from ledgerflow.operators import upgrades as upgrades_module
from ledgerflow.operators.service import MigrationPlan, Operations
from ledgerflow.storage import open_store
from replay_shop import ORDER, run_orders, shop

WAITING = {**ORDER, "wait": True}


@pytest.fixture(autouse=True)
def movers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The actors these tests move instances as hold a role that allows it (version moves
    need one, like repairs: the authority file of LEDGERFLOW_AUTHORITY)."""
    policy = granting(tmp_path, "upgrade", "migrate", actors=("alice", "bob", "al"))
    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", policy)


@pytest.fixture
def waiting(journal_url: str) -> dict[str, str]:
    """Two orders waiting for ``go`` after their hold, and one that ended."""
    return asyncio.run(
        run_orders(journal_url, shop("v1").registry, a=WAITING, b=WAITING, done=ORDER)
    )


def _keys(url: str, instance_id: str) -> list[tuple[str, str, str]]:
    with Operations(url) as operations:
        effects = operations.detail(instance_id).effects
    return sorted((e.effect_id, e.idempotency_key, e.state.value) for e in effects)


def _go(url: str, registry: lf.Registry, *instance_ids: str) -> dict[str, lf.InstanceRecord]:
    async def main() -> dict[str, lf.InstanceRecord]:
        async with lf.Engine(url, registry) as engine:
            for instance_id in instance_ids:
                await engine.signal(instance_id, "go", event_id=f"go-{instance_id}")
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            return {i: await engine.get(i) for i in instance_ids}

    return asyncio.run(main())


def test_an_upgrade_dry_run_changes_nothing_and_an_upgrade_moves_clean_instances(
    journal_url: str, waiting: dict[str, str]
) -> None:
    patched = shop("patched")
    fingerprint = patched.registry.get("order", 1).fingerprint
    before = dump(journal_url)
    with Operations(journal_url) as operations:
        dry = operations.upgrade(
            patched.registry,
            workflow="order",
            version=1,
            to_fingerprint=fingerprint,
            actor="alice",
            dry_run=True,
        )
    assert sorted(o.outcome for o in dry.outcomes) == ["would-move", "would-move"]
    assert dump(journal_url) == before
    keys = {i: _keys(journal_url, i) for i in (waiting["a"], waiting["b"])}
    with Operations(journal_url) as operations:
        report = operations.upgrade(
            patched.registry, workflow="order", version=1, to_fingerprint=fingerprint, actor="alice"
        )
        audit = operations.audit(AuditQuery(kind="upgrade"))
    assert sorted(o.outcome for o in report.outcomes) == ["moved", "moved"]
    assert {a.instance_id for a in audit} == {waiting["a"], waiting["b"]}
    assert all(a.actor == "alice" and a.outcome == "applied" for a in audit)
    assert json.loads(audit[0].evidence or "{}")["compatible"] is True
    assert {i: _keys(journal_url, i) for i in keys} == keys
    # The new code runs them to the end; the hold is not sent again, the patch is taken.
    ended = _go(journal_url, patched.registry, waiting["a"], waiting["b"])
    assert {r.status for r in ended.values()} == {lf.InstanceStatus.SUCCEEDED}
    assert [c.split()[0] for c in patched.calls] == ["send", "send"]
    with Operations(journal_url) as operations:
        names = [s.name for s in operations.detail(waiting["a"]).steps]
        again = operations.upgrade(
            patched.registry, workflow="order", version=1, to_fingerprint=fingerprint, actor="bob"
        )
    assert names == ["price", "stock.hold", "wait:go", "patched:fee", "fee", "note", "mail.send"]
    assert again.outcomes == ()


def test_a_divergent_instance_stays_pinned_with_its_divergence(
    journal_url: str, waiting: dict[str, str]
) -> None:
    repriced = shop("repriced")
    fingerprint = repriced.registry.get("order", 1).fingerprint
    with Operations(journal_url) as operations:
        pinned = operations.detail(waiting["a"]).instance.fingerprint
        report = operations.upgrade(
            repriced.registry,
            workflow="order",
            version=1,
            to_fingerprint=fingerprint,
            actor="alice",
        )
        assert operations.detail(waiting["a"]).instance.fingerprint == pinned
        # Each instance asked for and left pinned is on the record as refused, with why.
        records = operations.audit(AuditQuery(kind="upgrade"))
    assert sorted((r.instance_id, r.outcome, r.actor) for r in records) == sorted(
        (i, "refused", "alice") for i in (waiting["a"], waiting["b"])
    )
    assert all("diverged at position 1 (mismatch)" in (r.refusal or "") for r in records)
    assert {o.outcome for o in report.outcomes} == {"diverged"}
    verdict = report.outcomes[0].verdict
    assert verdict is not None
    assert (verdict.position, verdict.kind) == (1, "mismatch")
    assert "local 'price'" in (verdict.holds or "")
    assert "local 'pricing'" in (verdict.asks or "")


def test_an_upgrade_asks_for_the_code_it_names(journal_url: str, waiting: dict[str, str]) -> None:
    with (
        Operations(journal_url) as operations,
        pytest.raises(lf.errors.ConfigurationError, match="has fingerprint"),
    ):
        operations.upgrade(
            shop("patched").registry,
            workflow="order",
            version=1,
            to_fingerprint="0" * 32,
            actor="alice",
        )


def _unknown_effect(url: str) -> str:
    """An order whose hold's outcome is UNKNOWN, parked (no lookup, no deduplication)."""
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock"))

    @stock.effect(classification="reversible", retry=lf.RetryPolicy(attempts_max=1))
    async def hold(call: lf.EffectCall) -> Any:
        raise TimeoutError("no answer")

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, _: Any) -> str:
        await ctx.effect(hold, {"sku": "A"})
        return "done"

    return asyncio.run(run_orders(url, registry, lost=ORDER))["lost"]


def _held_with(payload: dict[str, str]) -> lf.Registry:
    """Edited order v1 code that holds ``payload`` first (the UNKNOWN hold's position)."""
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock"))

    @stock.effect(classification="reversible")
    async def hold(call: lf.EffectCall) -> Any:
        return {}

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, _: Any) -> str:
        await ctx.effect(hold, payload)
        return "done, changed"

    return registry


def test_an_unknown_effect_moves_only_to_code_that_asks_for_that_effect(journal_url: str) -> None:
    """Goal: the operator's move applies the adoption's rule (issue 23): an UNKNOWN effect
    refuses nothing when the replay reaches it with the new code asking for that very effect
    (the move keeps its key and its UNKNOWN state, for the new code's driver or an operator to
    settle); code that asks for another effect there is not moved."""
    lost = _unknown_effect(journal_url)
    before = _keys(journal_url, lost)
    other = _held_with({"sku": "B"})
    with Operations(journal_url) as operations:
        assert operations.detail(lost).instance.status is lf.InstanceStatus.MANUAL_INTERVENTION
        report = operations.upgrade(
            other,
            workflow="order",
            version=1,
            to_fingerprint=other.get("order", 1).fingerprint,
            actor="alice",
        )
    (outcome,) = report.outcomes
    assert outcome.outcome == "diverged"
    assert outcome.verdict is not None
    assert (outcome.verdict.position, outcome.verdict.kind) == (1, "mismatch")
    same = _held_with({"sku": "A"})
    with Operations(journal_url) as operations:
        report = operations.upgrade(
            same,
            workflow="order",
            version=1,
            to_fingerprint=same.get("order", 1).fingerprint,
            actor="alice",
        )
        moved = operations.detail(lost).instance
    (outcome,) = report.outcomes
    assert outcome.outcome == "moved", outcome.refusal
    assert outcome.verdict is not None
    assert outcome.verdict.reached_open == (1,)
    assert moved.fingerprint == same.get("order", 1).fingerprint
    assert _keys(journal_url, lost) == before  # the same key, still UNKNOWN
    assert [state for _, _, state in before] == ["UNKNOWN"]


def test_a_live_lease_refuses_the_move(journal_url: str, waiting: dict[str, str]) -> None:
    patched = shop("patched")
    fingerprint = patched.registry.get("order", 1).fingerprint

    async def start() -> str:
        async with lf.Engine(journal_url, shop("v1").registry) as engine:
            return (await engine.start("order", key="held", input=ORDER)).instance_id

    held = asyncio.run(start())
    # A stalled worker claims the new instance and holds its lease without driving it.
    store = open_store(journal_url)
    try:
        claimed = store.claim(
            owner=WorkerId("stalled"), now=time.time() + 1, lease_seconds=600, limit=10
        )
    finally:
        store.close()
    assert [c.instance_id for c in claimed] == [held]
    with Operations(journal_url) as operations:
        report = operations.upgrade(
            patched.registry, workflow="order", version=1, to_fingerprint=fingerprint, actor="al"
        )
    outcomes = {o.instance_id: o for o in report.outcomes}
    assert outcomes[waiting["a"]].outcome == "moved"
    refused = outcomes[held]
    assert refused.outcome == "refused"
    assert "live lease" in (refused.refusal or "")


def _plan() -> MigrationPlan:
    return MigrationPlan.from_document(
        {"workflow": "order", "from_version": 1, "to_version": 2, "positions": {"1": 2, "2": 1}}
    )


def test_a_migration_moves_positions_and_keeps_every_key(
    journal_url: str, waiting: dict[str, str]
) -> None:
    v2 = shop("v2")
    keys = _keys(journal_url, waiting["a"])
    before = dump(journal_url)
    with Operations(journal_url) as operations:
        dry = operations.migrate_instances(v2.registry, _plan(), actor="alice", dry_run=True)
    assert dump(journal_url) == before
    assert sorted(o.outcome for o in dry.outcomes) == ["would-move", "would-move"]
    with Operations(journal_url) as operations:
        report = operations.migrate_instances(v2.registry, _plan(), actor="alice")
        detail = operations.detail(waiting["a"])
        audit = operations.audit(AuditQuery(kind="migrate", instance_id=waiting["a"]))
        repeat = operations.migrate_instances(v2.registry, _plan(), actor="alice")
    assert sorted(o.outcome for o in report.outcomes) == ["moved", "moved"]
    assert detail.instance.workflow_version == 2
    assert [(s.seq, s.name) for s in detail.steps] == [
        (1, "stock.hold"),
        (2, "price"),
        (3, "wait:go"),
    ]
    assert _keys(journal_url, waiting["a"]) == keys
    assert len(audit) == 1
    assert json.loads(audit[0].plan)["moves"][0]["from_seq"] in (1, 2)
    assert repeat.outcomes == ()
    ended = _go(journal_url, v2.registry, waiting["a"])[waiting["a"]]
    assert ended.status is lf.InstanceStatus.SUCCEEDED
    assert [c.split()[0] for c in v2.calls] == ["send"]  # the hold was not sent again


def test_a_migration_that_mints_new_keys_is_caught(
    journal_url: str, waiting: dict[str, str]
) -> None:
    """The mutation: moved effects written back with keys derived from their new position.
    The comparison of keys before and after (as in the test above) must see it."""
    keys = _keys(journal_url, waiting["a"])
    with breakages.broken(breakages.REMINT_MOVED_KEYS), Operations(journal_url) as operations:
        operations.migrate_instances(shop("v2").registry, _plan(), actor="alice")
    assert _keys(journal_url, waiting["a"]) != keys


def test_an_instance_whose_compensation_is_under_way_is_refused(journal_url: str) -> None:
    """A failed order whose compensation's outcome is lost parks mid-compensation: its code is
    not moved under it."""

    def registry(changed: bool) -> lf.Registry:
        made = lf.Registry()
        stock = made.add_participant(lf.Participant("stock"))

        @stock.compensation("release", retry=lf.RetryPolicy(attempts_max=1))
        async def release(call: lf.EffectCall) -> Any:
            raise TimeoutError("no answer")

        @stock.effect(classification="reversible", compensation="release")
        async def hold(call: lf.EffectCall) -> Any:
            return {"held": True}

        register = made.workflow(name="order", version=1, business_failures=(ValueError,))
        if changed:

            @register
            async def order(ctx: lf.WorkflowContext, _: Any) -> str:
                await ctx.effect(hold, {"sku": "A"})
                raise ValueError("sold out")

        else:

            @register
            async def order(ctx: lf.WorkflowContext, _: Any) -> str:
                await ctx.effect(hold, {"sku": "A"})
                raise ValueError("out of stock")

        return made

    started = asyncio.run(run_orders(journal_url, registry(False), failing=ORDER))
    changed = registry(True)
    with Operations(journal_url) as operations:
        detail = operations.detail(started["failing"])
        assert detail.instance.status is lf.InstanceStatus.MANUAL_INTERVENTION
        assert any(s.seq < 0 for s in detail.steps)
        report = operations.upgrade(
            changed,
            workflow="order",
            version=1,
            to_fingerprint=changed.get("order", 1).fingerprint,
            actor="alice",
        )
    (outcome,) = report.outcomes
    assert outcome.outcome == "refused"
    assert outcome.refusal == "a compensation is in progress"


def test_a_journal_that_moves_on_after_the_replay_is_not_moved(
    journal_url: str, waiting: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: an upgrade decides from the journal it replayed; a worker that drives the
    instance on between that replay and the move (another transaction) makes the move stale,
    and it is refused, not applied over the new history (docs/state-machines.md, "Decided from
    a read").

    Method: wrap the replay: once it has judged instance "a" clean, a v1 worker delivers "go"
    and runs "a" to its end, in another thread and connection; the move of "a" is refused as
    stale, "a" ended under the code it was pinned to, and "b" (untouched) moves.
    """
    patched = shop("patched")
    fingerprint = patched.registry.get("order", 1).fingerprint
    replay = upgrades_module.replay

    async def replay_then_move_on(*args: Any, **kwargs: Any) -> Any:
        verdict = await replay(*args, **kwargs)
        instance = args[1]
        if instance.instance_id == waiting["a"]:
            moved_on: dict[str, lf.InstanceRecord] = {}
            worker = threading.Thread(
                target=lambda: moved_on.update(_go(journal_url, shop("v1").registry, waiting["a"]))
            )
            worker.start()
            worker.join(timeout=60)
            assert moved_on[waiting["a"]].status is lf.InstanceStatus.SUCCEEDED
        return verdict

    monkeypatch.setattr(upgrades_module, "replay", replay_then_move_on)
    with Operations(journal_url) as operations:
        report = operations.upgrade(
            patched.registry, workflow="order", version=1, to_fingerprint=fingerprint, actor="al"
        )
        ended = operations.detail(waiting["a"]).instance
    outcomes = {o.instance_id: o for o in report.outcomes}
    assert outcomes[waiting["a"]].outcome == "refused"
    assert "planned against WAITING" in (outcomes[waiting["a"]].refusal or "")
    assert outcomes[waiting["b"]].outcome == "moved"
    assert (ended.status, ended.fingerprint) == (
        lf.InstanceStatus.SUCCEEDED,
        shop("v1").registry.get("order", 1).fingerprint,
    )


def test_a_run_moved_across_a_patch_takes_one_side_of_it(
    journal_url: str, waiting: dict[str, str]
) -> None:
    """Goal: a change id is decided once per run. A run moved to new code while it waited,
    whose journal took the old branch before the wait, takes the old branch after it too
    (never half of the patch); a run that starts on the new code takes both sides.

    Method: "patched-twice" guards a fee before the wait and a fee note after it behind one
    change id, "fee". Upgrade the waiting v1 orders to it (their replay is clean: the journal
    holds the wait where the first call stands), let one go, and start a new order on it.
    """
    twice = shop("patched-twice")
    fingerprint = twice.registry.get("order", 1).fingerprint
    with Operations(journal_url) as operations:
        report = operations.upgrade(
            twice.registry, workflow="order", version=1, to_fingerprint=fingerprint, actor="al"
        )
    assert {o.outcome for o in report.outcomes} == {"moved"}
    ended = _go(journal_url, twice.registry, waiting["a"])
    assert ended[waiting["a"]].status is lf.InstanceStatus.SUCCEEDED
    fresh = asyncio.run(run_orders(journal_url, twice.registry, fresh=ORDER))["fresh"]
    with Operations(journal_url) as operations:
        moved = [s.name for s in operations.detail(waiting["a"]).steps]
        new = [s.name for s in operations.detail(fresh).steps]
    assert moved == ["price", "stock.hold", "wait:go", "note", "mail.send"]
    assert new == ["price", "stock.hold", "patched:fee", "fee", "fee-note", "note", "mail.send"]
