"""Continue-as-new: run N closes and run N+1 of the same instance opens in one transaction.

Each test runs on both backends (``journal_url``): the switch carries every event no wait has
taken, an event id is a duplicate in every later run, effect keys of consecutive runs never
meet, the switch is refused while an effect of the run is unsettled, a later run's failure or
cancel still compensates what an earlier run committed, and the journal a worker loads is the
open run's only, however long the chain.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import continue_racing
import ledgerflow as lf
from conditions import eventually
from ledgerflow import limits
from ledgerflow.cli.main import cli
from ledgerflow.errors import ConcurrencyError, UnsettledEffectsError
from ledgerflow.ledger.records import Commit, ContinueRun
from ledgerflow.ledger.transitions import new_effect, new_step
from ledgerflow.model.effect import EffectEvent
from ledgerflow.model.ids import RunNumber, StepSeq, WorkerId, effect_id, idempotency_key
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.model.step import StepEvent, StepKind
from ledgerflow.operators.paging import overview
from ledgerflow.operators.shapes import overview_json
from ledgerflow.runtime import faults
from ledgerflow.testing import run_checks
from ledgerflow.testing.oracle import Snapshot
from lost_wakeups import ArriveAt
from processes import LEDGERFLOW, TESTS, WAIT_SECONDS_MAX, child_environment, worker_process

QUICK = lf.RetryPolicy(attempts_max=2, backoff_initial=timedelta(milliseconds=1))


class Shop:
    """A counter that continues every ``every`` events, a chain that charges once per run, and
    the participants' own count of applications by key."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()
        self.refunded: Counter[str] = Counter()
        self.registry = lf.Registry()
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.compensation("refund", retry=QUICK)
        async def refund(call: lf.EffectCall) -> dict[str, Any]:
            self.refunded[call.original_key or ""] += 1
            return {"refunded": call.original_key}

        @bank.effect(classification="compensatable", retry=QUICK, compensation="refund")
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.applied[call.idempotency_key] += 1
            return {"charged": call.payload}

        @self.registry.workflow(name="counter", version=1)
        async def counter(ctx: lf.WorkflowContext, state: dict[str, Any]) -> dict[str, Any]:
            seen = list(state["seen"])
            while len(seen) < state["until"]:
                event = await ctx.wait_for("add")
                seen.append(event.payload)
                if len(seen) % state["every"] == 0 and len(seen) < state["until"]:
                    ctx.continue_as_new({**state, "seen": seen})
            return {"seen": seen, "run": ctx.run}

        @self.registry.workflow(name="chain", version=1)
        async def chain(ctx: lf.WorkflowContext, state: dict[str, Any]) -> str:
            await ctx.effect(charge, {"run": ctx.run})
            if ctx.run < state["runs"]:
                ctx.continue_as_new(state)
            if state.get("fail"):
                raise lf.BusinessFailure(f"run {ctx.run} fails")
            if state.get("wait"):
                await ctx.wait_for("never")
            return f"done in run {ctx.run}"

        @self.registry.workflow(name="loop", version=1)
        async def loop(ctx: lf.WorkflowContext, state: dict[str, Any]) -> int:
            i = state["i"]
            while i < state["until"]:
                i = await ctx.step("tick", _add_one, i)
                if i % state["every"] == 0 and i < state["until"]:
                    ctx.continue_as_new({**state, "i": i})
            return i


def _add_one(i: int) -> int:
    return i + 1


@pytest.fixture
def shop() -> Shop:
    return Shop()


async def _work(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_idle=True)


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_events_cross_every_switch_none_lost_none_twice(journal_url: str, shop: Shop) -> None:
    """Ten events sent at once to a counter that continues every three: run 4 ends with all
    ten in order; each was consumed once, filed under the run whose wait took it; the switches
    are on the timeline and each closed run has its row of history."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start(
                "counter", key="c-1", input={"seen": [], "every": 3, "until": 10}
            )
            iid = started.instance_id
            for n in range(10):
                await engine.signal(iid, "add", event_id=f"e{n}", payload=n)
            await _work(engine)
            record = await engine.get(iid)
            assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
            assert record.result_value == {"seen": list(range(10)), "run": 4}
            assert record.run == 4
            assert record.input_value == {"seen": [], "every": 3, "until": 10}
            assert record.run_input_value["seen"] == list(range(9))
            inbox = engine.store.inbox(iid)
            assert [d.state.value for d in inbox] == ["CONSUMED"] * 10
            assert [d.run for d in inbox] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
            runs = engine.store.runs(iid)
            assert [(r.run, r.steps) for r in runs] == [(1, 3), (2, 3), (3, 3)]
            assert runs[1].input_value["seen"] == [0, 1, 2]
            switches = [e for e in engine.store.timeline(iid) if e.subject == "run"]
            assert [(e.from_state, e.to_state) for e in switches] == [
                ("1", "2"),
                ("2", "3"),
                ("3", "4"),
            ]

    _run(main())


def test_an_event_id_is_a_duplicate_in_every_later_run(journal_url: str, shop: Shop) -> None:
    """Deduplication belongs to the instance: an event id taken in run 1 and sent again in
    run 2 is a duplicate (Temporal's deduplication does not cross a continue-as-new)."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start(
                "counter", key="c-2", input={"seen": [], "every": 1, "until": 3}
            )
            iid = started.instance_id
            await engine.signal(iid, "add", event_id="same", payload="first")
            await _work(engine)
            assert (await engine.get(iid)).run == 2
            again = await engine.signal(iid, "add", event_id="same", payload="first")
            assert again.outcome is lf.DeliveryOutcome.DUPLICATE
            assert again.delivery.run == 1
            # Another event under a used id is refused, not kept for the new run.
            with pytest.raises(ConcurrencyError):
                await engine.signal(iid, "add", event_id="same", payload="other")
            await engine.signal(iid, "add", event_id="next", payload="second")
            await engine.signal(iid, "add", event_id="last", payload="third")
            await _work(engine)
            record = await engine.get(iid)
            assert record.result_value == {"seen": ["first", "second", "third"], "run": 3}

    _run(main())


def test_effect_keys_of_consecutive_runs_are_disjoint(journal_url: str, shop: Shop) -> None:
    """One charge per run, three runs: three keys, each naming its run, each applied once."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("chain", key="k-1", input={"runs": 3})
            await _work(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
            assert record.result_value == "done in run 3"
            effects = engine.store.effects(started.instance_id)
            keys = [e.idempotency_key for e in effects]
            assert len(set(keys)) == 3
            assert [e.run for e in effects] == [1, 2, 3]
            assert all(f"/r{e.run}/s1/" in e.idempotency_key for e in effects)
            assert set(shop.applied) == set(keys)
            assert set(shop.applied.values()) == {1}

    _run(main())


def test_a_later_failure_compensates_every_run_newest_first(journal_url: str, shop: Shop) -> None:
    """Run 3 fails: the charges of runs 3, 2 and 1 are refunded, in that order, and the
    instance ends COMPENSATED (the chain is one saga, not three)."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("chain", key="k-2", input={"runs": 3, "fail": True})
            await _work(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.COMPENSATED, record.reason
            effects = engine.store.effects(started.instance_id)
            charges = [e for e in effects if e.compensates is None]
            refunds = [e for e in effects if e.compensates is not None]
            assert {r.compensates for r in refunds} == {c.effect_id for c in charges}
            assert all(r.run == 3 for r in refunds)
            # Newest first: run 3's charge, then run 2's, then run 1's.
            by_seq = sorted(refunds, key=lambda r: r.seq)
            undone = {c.effect_id: c.run for c in charges}
            assert [undone[r.compensates or ""] for r in by_seq] == [3, 2, 1]
            assert set(shop.refunded.values()) == {1}
            assert len(shop.refunded) == 3

    _run(main())


def test_a_cancel_in_a_later_run_undoes_the_earlier_runs(journal_url: str, shop: Shop) -> None:
    """Run 2 waits; a cancel request undoes run 1's charge and run 2's: the obligations of a
    closed run stay the instance's."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("chain", key="k-3", input={"runs": 2, "wait": True})
            await _work(engine)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.WAITING
            await engine.cancel(started.instance_id, reason="changed my mind")
            await _work(engine)
            record = await engine.get(started.instance_id)
            assert record.status is lf.InstanceStatus.CANCELLED, record.reason
            assert len(shop.refunded) == 2

    _run(main())


def test_the_store_refuses_a_switch_while_an_effect_is_unsettled(journal_url: str) -> None:
    """An effect INTENDED in run 1: a commit that closes run 1 is refused with
    UnsettledEffectsError and changes nothing."""
    registry = lf.Registry()

    @registry.workflow(name="idle", version=1)
    async def idle(ctx: lf.WorkflowContext, _: None) -> None:
        await ctx.wait_for("never")

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start("idle", key="u-1", input=None)
            store = engine.store
            owner = WorkerId("test-owner")
            [claimed] = store.claim(owner=owner, now=time.time(), lease_seconds=30, limit=1)
            seq = StepSeq(1)
            step = new_step(
                claimed,
                seq,
                StepEvent.START,
                kind=StepKind.EFFECT,
                name="bank.charge",
                input="1",
                retry_policy="{}",
                now=time.time(),
            )
            eid = effect_id(claimed.instance_id, claimed.run, seq)
            intent = new_effect(
                claimed,
                seq,
                EffectEvent.INTEND,
                effect_id=eid,
                participant="bank",
                operation="charge",
                classification="compensatable",
                idempotency_key=idempotency_key(
                    tenant=claimed.tenant, effect=eid, participant="bank", operation="charge"
                ),
                payload="1",
                now=time.time(),
            )
            fence = {"instance_id": claimed.instance_id, "owner": owner}
            [error] = store.commit(
                [Commit(**fence, generation=claimed.generation, writes=(step, intent))],
                now=time.time(),
            )
            assert error is None
            switch = ContinueRun(run=RunNumber(1), input="2")
            [error] = store.commit(
                [Commit(**fence, generation=claimed.generation, writes=(switch,))],
                now=time.time(),
            )
            assert isinstance(error, UnsettledEffectsError)
            assert error.run == 1
            assert error.unsettled == 1
            assert store.get_instance(started.instance_id).run == 1  # type: ignore[union-attr]
            assert store.runs(started.instance_id) == []

    _run(main())


def test_show_and_the_instance_page_list_the_runs(journal_url: str, shop: Shop) -> None:
    """``ledgerflow show`` (text and JSON) and the HTTP instance page name the open run, its
    input, and the closed runs with their steps and inputs."""

    async def main() -> str:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("chain", key="k-show", input={"runs": 3})
            await _work(engine)
            record = await engine.get(started.instance_id)
            page = overview_json(overview(engine.store, record))
            assert [(r["run"], r["steps"]) for r in page["runs"]] == [(1, 1), (2, 1)]
            assert page["instance"]["run"] == 3
            return started.instance_id

    iid = _run(main())
    shown = CliRunner().invoke(cli, ["show", iid, "--db", journal_url, "--json"])
    assert shown.exit_code == 0, shown.output
    detail = json.loads(shown.output)
    assert [r["run"] for r in detail["runs"]] == [1, 2]
    assert detail["runs"][0]["input"] == {"runs": 3}
    assert detail["instance"]["run"] == 3
    text = CliRunner().invoke(cli, ["show", iid, "--db", journal_url])
    assert text.exit_code == 0, text.output
    assert "runs (closed by continue-as-new: all)" in text.output
    assert "(open)" in text.output


@contextlib.contextmanager
def _arriving_at(point: str, arrive: Callable[[], object]) -> Iterator[None]:
    """A fault plan that runs ``arrive`` (another connection) at the first hit of ``point``."""
    plan = ArriveAt(point, arrive)
    faults.install(plan)
    try:
        yield
    finally:
        faults.install(None)
    assert plan.arrived == 1, f"{point} was never hit"


def test_a_signal_at_the_switch_is_taken_by_the_next_run(journal_url: str, shop: Shop) -> None:
    """A tick sent from another connection while run 1 is closing (its code has asked to
    continue, the switch is not yet committed) waits for run 2's first wait: filed under run
    1, moved by the switch, taken once."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start(
                "counter", key="c-switch", input={"seen": [], "every": 1, "until": 2}
            )
            iid = started.instance_id
            outside = lf.SyncEngine(journal_url, shop.registry)

            def tick() -> None:
                outside.signal(iid, "add", event_id="at-switch", payload="second")

            await engine.signal(iid, "add", event_id="first", payload="first")
            try:
                with _arriving_at("run.before_switch", tick):
                    await _work(engine)
            finally:
                outside.close()
            record = await engine.get(iid)
            assert record.result_value == {"seen": ["first", "second"], "run": 2}
            kept = engine.store.delivery(iid, "at-switch")
            assert kept is not None
            assert (kept.state.value, kept.run, kept.consumed_seq) == ("CONSUMED", 2, 1)

    _run(main())


def test_a_cancel_that_arrives_before_the_switch_wins(journal_url: str, shop: Shop) -> None:
    """A cancel request recorded while run 1 is closing: the switch is not made (no run 2),
    the instance cancels and run 1's charge is refunded."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry) as engine:
            started = await engine.start("chain", key="k-race", input={"runs": 2})
            iid = started.instance_id

            def cancel() -> None:
                outside = lf.SyncEngine(journal_url, shop.registry)
                try:
                    outside.cancel(iid, reason="while it switches")
                finally:
                    outside.close()

            with _arriving_at("run.before_switch", cancel):
                await _work(engine)
            record = await engine.get(iid)
            assert record.status is lf.InstanceStatus.CANCELLED, record.reason
            assert record.run == 1
            assert engine.store.runs(iid) == []
            assert len(shop.refunded) == 1

    _run(main())


def _loop_seconds(journal_url: str, registry: lf.Registry, *, until: int, every: int) -> Any:
    async def main() -> Any:
        async with lf.Engine(journal_url, registry) as engine:
            started = await engine.start(
                "loop", key=f"loop-{until}", input={"i": 0, "until": until, "every": every}
            )
            await _work(engine)
            record = await engine.get(started.instance_id)
            loaded = engine.store.journal(started.instance_id, record.run)
            return record, engine.store.runs(started.instance_id), len(loaded.steps)

    return _run(main())


def test_a_long_loop_keeps_each_run_journal_bounded(journal_url: str, shop: Shop) -> None:
    """2,000 iterations continuing every 100: 20 runs of 100 steps each, the worker loading
    only the open run's journal (bench/continue_as_new.py measures 10,000)."""
    record, runs, loaded = _loop_seconds(journal_url, shop.registry, until=2000, every=100)
    assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
    assert record.result_value == 2000
    assert record.run == 20
    assert [r.steps for r in runs] == [100] * 19
    # What a worker loads for the instance is the open run's journal: 100 steps, not 2,000.
    assert loaded == 100


def test_a_chain_that_never_waits_shares_its_worker(journal_url: str, shop: Shop) -> None:
    """150 runs of one step each, none waiting: one claim drives at most RUNS_PER_CLAIM_MAX
    of them, gives the instance back due at once, and the next claim goes on."""
    record, runs, loaded = _loop_seconds(journal_url, shop.registry, until=150, every=1)
    assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
    assert record.run == 150
    assert len(runs) == 149
    assert loaded == 1
    # Runs 1 to RUNS_PER_CLAIM_MAX closed under the first claim, the rest under a later one.
    assert {r.generation for r in runs[: limits.RUNS_PER_CLAIM_MAX]} == {runs[0].generation}
    assert runs[-1].generation > runs[0].generation


# -- signals racing switches, from another process ----------------------------------------------

SIGNALS = 1_000
EVERY = 10
SENDERS = 2
RACE_SECONDS_MAX = 60.0


@pytest.fixture
def racing_workers(journal_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    log = (tmp_path / "workers.log").open("ab")
    command = [
        *LEDGERFLOW,
        *("worker", "continue_racing:registry", "--db", journal_url),
        *("--lease-seconds", "5", "--poll-seconds", "0.01"),
    ]
    env = child_environment(TESTS)
    env.pop("LEDGERFLOW_FAULTS", None)
    processes = [subprocess.Popen(command, env=env, stdout=log, stderr=log) for _ in range(2)]
    yield processes
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=WAIT_SECONDS_MAX)
    log.close()


def _send(url: str, instance_id: str, ids: list[str]) -> Counter[str]:
    """Send each event id (those given twice are sent twice); count the outcomes."""
    outcomes: Counter[str] = Counter()
    engine = lf.SyncEngine(url, continue_racing.registry)
    try:
        for event_id in ids:
            delivered = engine.signal(instance_id, "tick", event_id=event_id, payload=event_id)
            outcomes[delivered.outcome.value] += 1
    finally:
        engine.close()
    return outcomes


@pytest.mark.slow
def test_a_thousand_signals_race_a_hundred_switches(
    journal_url: str, racing_workers: list[subprocess.Popen[bytes]]
) -> None:
    """Two worker processes drive a loop that continues as new every 10 ticks; two threads of
    this process send 1,000 ticks (and 100 of them again) as fast as they can, landing while
    runs close and open. Every tick is taken exactly once, by the run its turn fell in: 0 lost,
    0 duplicated, 100 switches, one open run."""
    outside = lf.SyncEngine(journal_url, continue_racing.registry)
    try:
        started = outside.start(
            "absorb", key="race", input={"taken": 0, "every": EVERY, "until": SIGNALS}
        )
        iid = started.instance_id
        ids = [f"t{n}" for n in range(SIGNALS)]
        shares = [ids[k::SENDERS] + ids[k::SENDERS][:50] for k in range(SENDERS)]
        with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:
            outcomes = sum(
                pool.map(lambda share: _send(journal_url, iid, share), shares), Counter()
            )
        assert outcomes == {"accepted": SIGNALS, "duplicate": 100}

        def ended() -> lf.InstanceRecord | None:
            assert all(p.poll() is None for p in racing_workers), "a worker process died"
            record = outside.get(iid)
            return record if record.status in TERMINAL_STATUSES else None

        record = eventually(ended, what="the loop to end", timeout=RACE_SECONDS_MAX)
        assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
        assert record.result_value == {"taken": SIGNALS, "run": SIGNALS // EVERY + 1}
        store = outside.store
        inbox = store.inbox(iid)
        assert len(inbox) == SIGNALS
        assert {d.state.value for d in inbox} == {"CONSUMED"}, "an event was lost"
        snapshot = Snapshot.of(store)
        taken = [
            json.loads(s.output or "{}")["event_id"]
            for s in snapshot.steps[iid]
            if s.kind is StepKind.WAIT
        ]
        assert sorted(taken) == sorted(ids), "an event was lost or taken twice"
        assert len(store.runs(iid)) == SIGNALS // EVERY
        # The race happened: ticks kept while an earlier run was open were taken by a later
        # one (moved by a switch), not only ticks that arrived after their run opened.
        opened_at = {int(e.to_state): e.at for e in snapshot.events[iid] if e.subject == "run"}
        moved = [d for d in inbox if d.run in opened_at and d.received_at < opened_at[d.run]]
        assert moved, "no tick was moved by a switch: the signals did not race the switches"
        found = [
            *run_checks.one_open_run(snapshot),
            *run_checks.no_event_lost_or_duplicated_across_a_switch(snapshot),
        ]
        assert found == []
    finally:
        outside.close()


# -- a worker process SIGKILLed at each side of the switch -----------------------------------------

KILLS = {
    "before the switch commits": {"point": "run.before_switch", "match": {"run": 2}},
    "after the switch committed": {"point": "run.after_switch", "match": {"run": 3}},
}


def _worker(url: str, log: Path, *, faults: list[dict[str, Any]] | None = None) -> Any:
    options = ("--lease-seconds", "1", "--poll-seconds", "0.01", "--until-idle")
    return worker_process(
        "continue_racing:registry", url, path=TESTS, log=log, options=options, faults=faults
    )


@pytest.mark.slow
@pytest.mark.parametrize("kill", list(KILLS))
def test_a_worker_killed_at_the_switch_loses_no_event(
    journal_url: str, tmp_path: Path, kill: str
) -> None:
    """SIGKILL a real worker process just before run 2's switch commits, or just after run 3
    opened; a fresh worker takes the instance over once the lease lapses. Thirty ticks sent
    up front are each taken once, the chain closes runs 1 to 3, one run is open."""
    outside = lf.SyncEngine(journal_url, continue_racing.registry)
    try:
        started = outside.start("absorb", key="kill", input={"taken": 0, "every": 10, "until": 30})
        iid = started.instance_id
        for n in range(30):
            outside.signal(iid, "tick", event_id=f"t{n}", payload=n)
        rule = {**KILLS[kill], "action": "kill"}
        killed = _worker(journal_url, tmp_path / "workers.log", faults=[rule])
        assert killed.wait(timeout=WAIT_SECONDS_MAX) == -signal.SIGKILL
        assert outside.get(iid).run == (2 if rule["point"] == "run.before_switch" else 3)
        fresh = _worker(journal_url, tmp_path / "workers.log")
        assert fresh.wait(timeout=WAIT_SECONDS_MAX) == 0
        record = outside.get(iid)
        assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
        assert record.result_value == {"taken": 30, "run": 4}
        snapshot = Snapshot.of(outside.store)
        taken = [
            json.loads(s.output or "{}")["event_id"]
            for s in snapshot.steps[iid]
            if s.kind is StepKind.WAIT
        ]
        assert sorted(taken) == sorted(f"t{n}" for n in range(30))
        assert [r.run for r in outside.store.runs(iid)] == [1, 2, 3]
        found = [
            *run_checks.one_open_run(snapshot),
            *run_checks.no_event_lost_or_duplicated_across_a_switch(snapshot),
        ]
        assert found == []
    finally:
        outside.close()
