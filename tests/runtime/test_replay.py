"""The replay checker: recorded histories against changed code, nothing dispatched.

Histories are made by real workers on a real journal (each backend); the checker replays them
against other editions of the code (``tests/replay_shop.py``) through the operators' service
and from exported files, and must name the first divergent position with both sides.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.operators.service import Operations
from ledgerflow.testing import FakeClock, ReplayVerdict, replay_histories, replay_history
from replay_shop import ORDER, run_orders, shop


def _replayed(url: str, edition: str) -> tuple[dict[str, ReplayVerdict], list[str]]:
    changed = shop(edition)
    with Operations(url) as operations:
        verdicts = operations.replay(changed.registry)
    return {v.instance_id: v for v in verdicts}, changed.calls


@pytest.fixture
def histories(journal_url: str) -> dict[str, str]:
    """One order that ended (SUCCEEDED) and one waiting for ``go`` after its hold."""
    return asyncio.run(
        run_orders(journal_url, shop("v1").registry, done=ORDER, waiting={**ORDER, "wait": True})
    )


# edition -> (position, what the journal holds, what the code asks for) for the ended order
DIVERGENCES = {
    "added": (3, "local 'note'", "local 'audit'"),
    "removed": (3, "local 'note'", "effect 'mail.send'"),
    "reordered": (3, "local 'note'", "effect 'mail.send'"),
    "renamed": (3, "local 'note'", "local 'remark'"),
    "payload": (4, "effect 'mail.send' with input {\"to\"", '"cc":"boss"'),
}


@pytest.mark.parametrize("edition", sorted(DIVERGENCES))
def test_each_change_is_reported_at_its_position(
    journal_url: str, histories: dict[str, str], edition: str
) -> None:
    verdicts, calls = _replayed(journal_url, edition)
    done = verdicts[histories["done"]]
    position, holds, asks = DIVERGENCES[edition]
    assert not done.compatible
    assert (done.kind, done.position) == ("mismatch", position)
    assert holds in (done.holds or ""), done
    assert asks in (done.asks or ""), done
    assert calls == []  # the participants saw nothing


def test_a_clean_change_replays_every_history(journal_url: str, histories: dict[str, str]) -> None:
    verdicts, calls = _replayed(journal_url, "clean")
    assert [v.compatible for v in verdicts.values()] == [True, True]
    assert verdicts[histories["done"]].replayed == 4
    assert verdicts[histories["waiting"]].replayed == 2  # then the open wait
    assert calls == []


def test_a_step_added_after_the_last_one_diverges_only_for_an_ended_history(
    journal_url: str, histories: dict[str, str]
) -> None:
    verdicts, _ = _replayed(journal_url, "appended")
    done = verdicts[histories["done"]]
    assert (done.compatible, done.kind, done.position, done.holds) == (False, "added", 5, None)
    assert "local 'thanks'" in (done.asks or "")
    assert verdicts[histories["waiting"]].compatible  # in flight: it may still go on


def test_a_recorded_step_the_code_no_longer_reaches_diverges(
    journal_url: str, histories: dict[str, str]
) -> None:
    verdicts, _ = _replayed(journal_url, "truncated")
    done = verdicts[histories["done"]]
    assert (done.compatible, done.kind, done.position, done.asks) == (False, "missing", 4, None)
    assert "effect 'mail.send'" in (done.holds or "")


def test_the_checker_dispatches_nothing_even_for_an_open_effect(journal_url: str) -> None:
    """A history whose effect is still INTENDED (a worker died after the intent) is not
    resolved by the checker: it stops there, and no participant is called."""
    calls: list[str] = []
    registry = lf.Registry()
    stock = registry.add_participant(lf.Participant("stock", deduplicates=True))

    @stock.effect(classification="reversible")
    async def hold(call: lf.EffectCall) -> dict[str, Any]:
        calls.append(call.idempotency_key)
        raise lf.testing.SimulatedCrash("the worker dies mid-dispatch")

    @registry.workflow(name="order", version=1)
    async def order(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.effect(hold, {"sku": "A"})
        return "done"

    async def crash_once() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            await engine.start("order", key="k", input=None)
            with pytest.raises(lf.testing.SimulatedCrash):
                await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)

    asyncio.run(crash_once())
    assert len(calls) == 1
    with Operations(journal_url) as operations:
        (verdict,) = operations.replay(registry)
    assert verdict.compatible
    assert verdict.replayed == 0
    assert len(calls) == 1


def test_exported_histories_replay_from_files(
    journal_url: str, histories: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    with Operations(journal_url) as operations:
        for key, instance_id in histories.items():
            document = operations.export(instance_id)
            (folder / f"{key}.json").write_text(json.dumps(document))
    assert document["format"] == "ledgerflow.history"
    assert document["format_version"] == 1
    assert [v.compatible for v in replay_histories(shop("clean").registry, folder)] == [True, True]
    renamed = replay_history(shop("renamed").registry, folder / "done.json")
    assert (renamed.compatible, renamed.position) == (False, 3)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**document, "format_version": 99}))
    with pytest.raises(lf.errors.PayloadError, match="format version 99"):
        replay_history(shop().registry, wrong)


def test_patched_serves_old_and_new_histories(journal_url: str, histories: dict[str, str]) -> None:
    """Old histories replay with patched() False; a new run takes the patch, journals a marker
    at its position and replays with True; the code without the patch no longer replays it."""
    patched = shop("patched")
    verdicts, _ = _replayed(journal_url, "patched")
    assert all(v.compatible for v in verdicts.values()), verdicts
    new = asyncio.run(run_orders(journal_url, patched.registry, new=ORDER))["new"]
    with Operations(journal_url) as operations:
        detail = operations.detail(new)
        assert [(s.seq, s.kind.value, s.name) for s in detail.steps][2:4] == [
            (3, "marker", "patched:fee"),
            (4, "local", "fee"),
        ]
        again = {v.instance_id: v for v in operations.replay(patched.registry)}
        assert again[new].compatible
        assert again[new].replayed == 6
        without = {v.instance_id: v for v in operations.replay(shop("v1").registry)}
        renamed = {v.instance_id: v for v in operations.replay(shop("repatched").registry)}
    assert (without[new].kind, without[new].position) == ("mismatch", 3)
    assert "marker 'patched:fee'" in (without[new].holds or "")
    # A marker answers only its own change id: another one takes the old branch, and diverges.
    assert (renamed[new].kind, renamed[new].position) == ("mismatch", 3)
    assert renamed[histories["done"]].compatible


def test_a_step_from_a_task_the_run_did_not_start_parks(journal_url: str) -> None:
    """Branches of the run take positions (tests/runtime/test_gather.py); a step run on
    another event loop, in a thread, would race for them and is refused."""
    registry = lf.Registry()

    def one(x: int) -> int:
        return x

    @registry.workflow(name="fan", version=1)
    async def fan(ctx: lf.WorkflowContext, _: None) -> Any:
        return await asyncio.to_thread(lambda: asyncio.run(ctx.step("a", one, 1)))

    async def main() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start("fan", key="k", input=None)
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_idle=True)
            return await engine.get(started.instance_id)

    record = asyncio.run(main())
    assert record.status is lf.InstanceStatus.MANUAL_INTERVENTION
    assert record.reason_code == "concurrent_steps"


def _waiting_code(*, sleep: float, timeout: float, event: str = "go") -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="paced", version=1)
    async def paced(ctx: lf.WorkflowContext, _: None) -> str:
        await ctx.sleep(sleep)
        got = await ctx.wait_for(event, timeout=timeout)
        return str(got.payload)

    return registry


def test_a_timer_or_timeout_of_another_length_replays_what_it_started(journal_url: str) -> None:
    """Goal: a started timer or wait keeps the due time its journal holds, so code that now
    sleeps or waits for another length (a bug fix: sleep(3) -> sleep(2)) replays an in-flight
    history clean and applies the new length only to what it starts; another event still
    diverges.

    Method: run "paced" (sleep 3600, then wait for "go" with a timeout of 600) to the sleep,
    and another past it to the wait (the clock moved past the sleep); replay both against
    sleep 60 / timeout 30 (compatible) and against a wait for "stop" (the waiting history
    diverges at the wait; the sleeping one never reached it).
    """
    clock = FakeClock()

    async def main() -> dict[str, str]:
        async with lf.Engine(journal_url, _waiting_code(sleep=3600, timeout=600), clock=clock) as e:
            waiting = (await e.start("paced", key="waiting")).instance_id
            await e.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            clock.advance(3601)  # its sleep fires: it moves on to the wait
            sleeping = (await e.start("paced", key="sleeping")).instance_id
            await e.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)
            return {"waiting": waiting, "sleeping": sleeping}

    started = asyncio.run(main())
    with Operations(journal_url) as operations:
        steps = {k: [s.name for s in operations.detail(i).steps] for k, i in started.items()}
        shorter = operations.replay(_waiting_code(sleep=60, timeout=30))
        other = {
            v.instance_id: v
            for v in operations.replay(_waiting_code(sleep=60, timeout=30, event="stop"))
        }
    assert steps == {"waiting": ["sleep", "wait:go"], "sleeping": ["sleep"]}
    assert [v.compatible for v in shorter] == [True, True], shorter
    assert other[started["sleeping"]].compatible
    diverged = other[started["waiting"]]
    assert (diverged.compatible, diverged.position) == (False, 2)
    assert "wait 'wait:go'" in (diverged.holds or "")
    assert "wait 'wait:stop'" in (diverged.asks or "")
