"""Start options: a delayed start (SCHEDULED), a conflict policy for a business key
(``if_running``, ``if_ended``, the input check and KeyInUseError), signal-with-start in one
transaction, and business keys that never expire. On a real SQLite file and on PostgreSQL;
a fake clock moves time, so a delay of an hour costs nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections import Counter
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import KeyInUseError, PayloadError
from ledgerflow.model.ids import InstanceId, RunNumber
from ledgerflow.testing import FakeClock

HOUR = 3600.0


class Shop:
    """A registry whose workflows count what their code did, per input."""

    def __init__(self) -> None:
        self.registry = lf.Registry()
        self.ran: Counter[str] = Counter()
        self.lock = threading.Lock()

        @self.registry.workflow(name="greet", version=1)
        async def greet(ctx: lf.WorkflowContext, name: str) -> str:
            with self.lock:
                self.ran[name] += 1
            hello = await ctx.step("hello", lambda: f"hello {name}")
            go = await ctx.wait_for("go")
            return f"{hello} {go.payload}"

        @self.registry.workflow(name="quick", version=1)
        async def quick(ctx: lf.WorkflowContext, name: str) -> str:
            with self.lock:
                self.ran[name] += 1
            if name.startswith("fail"):
                raise lf.BusinessFailure(f"{name} fails on purpose")
            return await ctx.step("done", lambda: f"done {name}")


@pytest.fixture
def shop() -> Shop:
    return Shop()


async def _work(engine: lf.Engine) -> None:
    await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)


def test_a_delayed_start_waits_visibly_keeps_its_events_and_runs_no_step_before_its_time(
    shop: Shop, journal_url: str
) -> None:
    """Goal: ``start_in`` makes the instance at once, SCHEDULED until its time; it can be read
    and signalled meanwhile and no step (none of its code) runs before its time; then it runs
    and takes the event sent while it waited.

    Method: start with start_in=1 h, signal it, run a worker until nothing is due; then move
    the fake clock past the hour and run again."""

    async def main() -> None:
        clock = FakeClock()
        async with lf.Engine(journal_url, shop.registry, clock=clock) as engine:
            started = await engine.start("greet", key="g-1", input="ann", start_in=HOUR)
            record = started.instance
            assert started.created
            assert record.status is lf.InstanceStatus.SCHEDULED
            assert record.available_at == clock.now() + HOUR
            assert record.reason_code == "scheduled"
            delivered = await engine.signal(started.instance_id, "go", event_id="e-1", payload=1)
            assert delivered.outcome is lf.DeliveryOutcome.ACCEPTED
            await _work(engine)
            detail = await engine.detail(started.instance_id)
            assert detail.instance.status is lf.InstanceStatus.SCHEDULED
            assert detail.steps == []
            assert shop.ran == Counter()
            listed = await engine.list(status=lf.InstanceStatus.SCHEDULED)
            assert [i.instance_id for i in listed] == [started.instance_id]
            clock.advance(HOUR)
            await _work(engine)
            assert await engine.result(started.instance_id, timeout=5) == "hello ann 1"
            assert shop.ran == Counter({"ann": 1})
            timeline = [(e.from_state, e.to_state) for e in detail.timeline]
            assert timeline[0] == (None, "SCHEDULED")

    asyncio.run(main())


def test_start_at_takes_epoch_seconds_or_an_aware_datetime_and_refuses_nonsense(
    shop: Shop, journal_url: str
) -> None:
    """Goal: ``start_at`` is a time (epoch seconds or an aware datetime); a naive datetime,
    both options at once, or a time in the past are handled as documented.

    Method: three starts, three refusals."""

    async def main() -> None:
        clock = FakeClock()
        async with lf.Engine(journal_url, shop.registry, clock=clock) as engine:
            at = datetime.datetime.fromtimestamp(clock.now() + 60, tz=datetime.UTC)
            by_datetime = await engine.start("greet", key="a-1", input="a", start_at=at)
            assert by_datetime.instance.available_at == clock.now() + 60
            by_seconds = await engine.start("greet", key="a-2", input="a", start_at=clock.now() + 5)
            assert by_seconds.instance.status is lf.InstanceStatus.SCHEDULED
            past = await engine.start("greet", key="a-3", input="a", start_at=clock.now() - 5)
            assert past.instance.status is lf.InstanceStatus.RUNNING
            for bad in (
                {"start_at": datetime.datetime(2030, 1, 1)},  # noqa: DTZ001 - naive on purpose
                {"start_at": clock.now() + 1, "start_in": 1.0},
                {"if_running": "restart"},
                {"if_ended": "sometimes"},
            ):
                with pytest.raises(PayloadError):
                    await engine.start("greet", key="a-4", input="a", **bad)  # type: ignore[arg-type]

    asyncio.run(main())


def test_a_scheduled_instance_cancelled_ends_cancelled_without_running_a_step(
    shop: Shop, journal_url: str
) -> None:
    """Goal: a cancel request during the delay ends the instance CANCELLED at once (a worker
    takes it now, not at its start time), and none of its code ever runs.

    Method: start in an hour, cancel, run a worker until nothing is due (the clock has not
    moved)."""

    async def main() -> None:
        clock = FakeClock()
        async with lf.Engine(journal_url, shop.registry, clock=clock) as engine:
            started = await engine.start("greet", key="c-1", input="bob", start_in=HOUR)
            await engine.signal(started.instance_id, "go", event_id="e-1", payload=1)
            await engine.cancel(started.instance_id, reason="not needed")
            await _work(engine)
            detail = await engine.detail(started.instance_id)
            assert detail.instance.status is lf.InstanceStatus.CANCELLED
            assert "before its scheduled start" in (detail.instance.reason or "")
            assert detail.steps == []
            assert shop.ran == Counter()
            assert detail.instance.cancel_outcome == "honoured"
            [event] = detail.inbox
            assert event.state.value == "REJECTED"
            assert event.refusal == "ended"

    asyncio.run(main())


def test_a_used_key_returns_the_instance_only_for_the_same_request(
    shop: Shop, journal_url: str
) -> None:
    """Goal: a start under a used key returns the instance (created False) only when it asks
    for the same version and input; another input is KeyInUseError naming the holder;
    ``if_running="fail"`` refuses even the same request while it is in flight.

    Method: start, then start again three ways."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry, clock=FakeClock()) as engine:
            first = await engine.start("greet", key="k-1", input="ann")
            again = await engine.start("greet", key="k-1", input="ann")
            assert (again.created, again.instance_id) == (False, first.instance_id)
            with pytest.raises(KeyInUseError) as other:
                await engine.start("greet", key="k-1", input="someone else")
            assert other.value.instance_id == first.instance_id
            assert (other.value.key, other.value.status) == ("k-1", "RUNNING")
            assert isinstance(other.value, lf.errors.ConcurrencyError)  # as the old refusal
            with pytest.raises(KeyInUseError, match="if_running='fail'"):
                await engine.start("greet", key="k-1", input="ann", if_running="fail")
            assert len(await engine.list()) == 1

    asyncio.run(main())


def test_if_ended_returns_refuses_or_starts_the_next_run_of_the_same_instance(
    shop: Shop, journal_url: str
) -> None:
    """Goal: once the instance ended, ``if_ended`` decides: ``return`` it as it ended,
    ``fail``, ``new_run`` (run 2 of the same instance, with the new input, run 1's journal
    kept and run 2's positions its own), ``new_run_if_failed`` (a new run after FAILED, the
    instance as it is after SUCCEEDED).

    Method: one key that succeeds, one that fails; starts under each policy."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry, clock=FakeClock()) as engine:
            ok = await engine.start("quick", key="q-ok", input="ann")
            bad = await engine.start("quick", key="q-bad", input="fail-1")
            await _work(engine)
            assert (await engine.get(bad.instance_id)).status is lf.InstanceStatus.FAILED
            same = await engine.start("quick", key="q-ok", input="ann")
            assert not same.created
            assert same.instance.status is lf.InstanceStatus.SUCCEEDED
            with pytest.raises(KeyInUseError, match="if_ended='fail'"):
                await engine.start("quick", key="q-ok", input="ann", if_ended="fail")
            kept = await engine.start(
                "quick", key="q-ok", input="ann", if_ended="new_run_if_failed"
            )
            assert not kept.created
            assert kept.instance.run == 1
            with pytest.raises(KeyInUseError):  # returned only to the same request
                await engine.start("quick", key="q-ok", input="x", if_ended="new_run_if_failed")
            retried = await engine.start(
                "quick", key="q-bad", input="bee", if_ended="new_run_if_failed"
            )
            assert retried.created
            assert retried.instance_id == bad.instance_id
            assert (retried.instance.run, retried.instance.status) == (2, lf.InstanceStatus.RUNNING)
            rerun = await engine.start("quick", key="q-ok", input="cy", if_ended="new_run")
            assert rerun.created
            assert rerun.instance.run == 2
            await _work(engine)
            assert await engine.result(ok.instance_id, timeout=5) == "done cy"
            assert await engine.result(bad.instance_id, timeout=5) == "done bee"
            journal = engine.store.journal
            run1 = journal(InstanceId(ok.instance_id), RunNumber(1))
            run2 = journal(InstanceId(ok.instance_id), RunNumber(2))
            assert run1.steps[1].output_value == "done ann"  # run 1's journal is kept
            assert run2.steps[1].output_value == "done cy"
            assert run1.steps[1].command_id != run2.steps[1].command_id
            assert shop.ran == Counter({"ann": 1, "fail-1": 1, "bee": 1, "cy": 1})

    asyncio.run(main())


def test_signal_with_start_commits_the_start_and_the_event_together(
    shop: Shop, journal_url: str
) -> None:
    """Goal: signal-with-start makes the instance and keeps the event in one transaction; a
    repeat is a no-op on both; a start refused (KeyInUseError) delivers nothing.

    Method: signal-with-start a new key, repeat it, then one with another input."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry, clock=FakeClock()) as engine:
            both = await engine.signal_with_start(
                "greet", key="s-1", input="ann", signal="go", event_id="e-1", payload=7
            )
            assert both.started.created
            assert both.delivered.outcome is lf.DeliveryOutcome.ACCEPTED
            again = await engine.signal_with_start(
                "greet", key="s-1", input="ann", signal="go", event_id="e-1", payload=7
            )
            assert not again.started.created
            assert again.delivered.outcome is lf.DeliveryOutcome.DUPLICATE
            with pytest.raises(KeyInUseError):
                await engine.signal_with_start(
                    "greet", key="s-1", input="bob", signal="go", event_id="e-2", payload=8
                )
            assert [e.event_id for e in (await engine.detail(both.instance_id)).inbox] == ["e-1"]
            await _work(engine)
            assert await engine.result(both.instance_id, timeout=5) == "hello ann 7"

    asyncio.run(main())


def test_a_business_key_never_expires_while_its_instance_exists(
    shop: Shop, journal_url: str
) -> None:
    """Goal: no deduplication window: ten years after an instance ended, its key still
    returns it and nothing runs again (Temporal forgets a closed workflow id after its
    retention, Inngest after 24 hours).

    Method: run an instance to its end, move the fake clock ten years, start again."""

    async def main() -> None:
        clock = FakeClock()
        async with lf.Engine(journal_url, shop.registry, clock=clock) as engine:
            first = await engine.start("quick", key="forever", input="ann")
            await _work(engine)
            clock.advance(10 * 366 * 24 * HOUR)
            again = await engine.start("quick", key="forever", input="ann")
            await _work(engine)
            assert (again.created, again.instance_id) == (False, first.instance_id)
            assert again.instance.status is lf.InstanceStatus.SUCCEEDED
            assert shop.ran == Counter({"ann": 1})

    asyncio.run(main())


STARTERS = 200
ENGINES = 4


def test_200_concurrent_starts_of_one_key_with_mixed_inputs(shop: Shop, journal_url: str) -> None:
    """Goal: 200 callers start one key at once with two inputs: one instance; the callers
    whose input matches it get it (exactly one of them hears it was created), every other
    gets KeyInUseError naming it; the body runs once.

    Method: four engines (four connections, as four processes would), 50 asyncio tasks
    each, inputs alternating; then a worker runs it."""

    async def main() -> dict[str, Any]:
        engines = [lf.Engine(journal_url, shop.registry) for _ in range(ENGINES)]
        gate = asyncio.Event()

        async def start(index: int) -> Any:
            await gate.wait()
            engine = engines[index % ENGINES]
            try:
                return await engine.start("quick", key="hot", input=f"in-{index % 2}")
            except KeyInUseError as refused:
                return refused

        tasks = [asyncio.create_task(start(i)) for i in range(STARTERS)]
        await asyncio.sleep(0)
        gate.set()
        answers = await asyncio.gather(*tasks)
        await _work(engines[0])
        for engine in engines:
            await engine.close()
        return {"answers": answers}

    answers = asyncio.run(main())["answers"]
    started = [(i, a) for i, a in enumerate(answers) if isinstance(a, lf.Started)]
    refused = [(i, a) for i, a in enumerate(answers) if isinstance(a, KeyInUseError)]
    assert len(started) + len(refused) == STARTERS
    [holder] = {a.instance_id for _, a in started}
    assert sum(a.created for _, a in started) == 1
    winning = started[0][1].instance.input_value
    assert all(f"in-{i % 2}" == winning for i, _ in started)
    assert all(f"in-{i % 2}" != winning for i, _ in refused)
    assert len(started) == len(refused) == STARTERS // 2
    assert all(r.instance_id == holder for _, r in refused)
    assert shop.ran == Counter({winning: 1})


def test_concurrent_new_runs_of_one_ended_key_start_one_run(shop: Shop, journal_url: str) -> None:
    """Goal: callers racing to start a new run of one ended instance start one run between
    them (the new run is conditional on the run and ending each read).

    Method: end an instance; 40 tasks over four engines ask for ``new_run`` with one input."""

    async def main() -> list[lf.Started]:
        async with lf.Engine(journal_url, shop.registry) as first:
            await first.start("quick", key="again", input="ann")
            await _work(first)
        engines = [lf.Engine(journal_url, shop.registry) for _ in range(ENGINES)]
        answers = await asyncio.gather(
            *(
                engines[i % ENGINES].start("quick", key="again", input="bee", if_ended="new_run")
                for i in range(40)
            )
        )
        for engine in engines:
            await engine.close()
        return list(answers)

    answers = asyncio.run(main())
    assert sum(a.created for a in answers) == 1
    assert {a.instance.run for a in answers} == {2}


def test_signal_with_start_racing_starts_keeps_the_event_once(shop: Shop, journal_url: str) -> None:
    """Goal: signal-with-starts and plain starts of one key racing over four connections make
    one instance whose inbox holds the event once, and it runs once with it.

    Method: 20 signal-with-starts (one event id) and 20 starts, interleaved, then a worker."""

    async def main() -> str:
        engines = [lf.Engine(journal_url, shop.registry) for _ in range(ENGINES)]
        calls = []
        for i in range(40):
            engine = engines[i % ENGINES]
            if i % 2:
                calls.append(engine.start("greet", key="race", input="ann"))
            else:
                calls.append(
                    engine.signal_with_start(
                        "greet", key="race", input="ann", signal="go", event_id="e-1", payload=3
                    )
                )
        answers = await asyncio.gather(*calls)
        outcomes = [a.delivered.outcome for a in answers if isinstance(a, lf.SignalStarted)]
        assert outcomes.count(lf.DeliveryOutcome.ACCEPTED) == 1
        assert outcomes.count(lf.DeliveryOutcome.DUPLICATE) == 19
        created = [a.created for a in answers if isinstance(a, lf.Started)] + [
            a.started.created for a in answers if isinstance(a, lf.SignalStarted)
        ]
        assert created.count(True) == 1
        await _work(engines[0])
        [instance] = await engines[0].list()
        inbox = (await engines[0].detail(instance.instance_id)).inbox
        assert [e.event_id for e in inbox] == ["e-1"]
        result: str = await engines[0].result(instance.instance_id, timeout=5)
        for engine in engines:
            await engine.close()
        return result

    assert asyncio.run(main()) == "hello ann 3"
    assert shop.ran == Counter({"ann": 1})


def test_a_signal_with_start_ends_the_delay_only_when_asked(shop: Shop, journal_url: str) -> None:
    """Goal: a signal-with-start keeps a delayed instance's delay (as a plain signal does)
    unless ``wake=True``, which makes it due now in the same transaction.

    Method: a start in an hour; a signal-with-start without wake (nothing runs), then one with
    wake and another event id (it runs now, the clock unmoved)."""

    async def main() -> None:
        async with lf.Engine(journal_url, shop.registry, clock=FakeClock()) as engine:
            started = await engine.start("greet", key="w-1", input="ann", start_in=HOUR)
            await engine.signal_with_start(
                "greet", key="w-1", input="ann", signal="go", event_id="e-1", payload=1
            )
            await _work(engine)
            assert (await engine.get(started.instance_id)).status is lf.InstanceStatus.SCHEDULED
            await engine.signal_with_start(
                "greet", key="w-1", input="ann", signal="go", event_id="e-2", payload=2, wake=True
            )
            await _work(engine)
            assert await engine.result(started.instance_id, timeout=5) == "hello ann 1"

    asyncio.run(main())


class Chain:
    """A workflow that charges once per run and continues as new until its last run, which
    succeeds or fails; the bank's own count of charges and refunds by key."""

    def __init__(self) -> None:
        self.charged: Counter[str] = Counter()
        self.refunded: Counter[str] = Counter()
        self.registry = lf.Registry()
        quick = lf.RetryPolicy(attempts_max=2, backoff_initial=datetime.timedelta(milliseconds=1))
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.compensation("refund", retry=quick)
        async def refund(call: lf.EffectCall) -> dict[str, Any]:
            self.refunded[call.original_key or ""] += 1
            return {"refunded": call.original_key}

        @bank.effect(classification="compensatable", retry=quick, compensation="refund")
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            self.charged[call.idempotency_key] += 1
            return {"charged": call.payload}

        @self.registry.workflow(name="chain", version=1)
        async def chain(ctx: lf.WorkflowContext, state: dict[str, Any]) -> dict[str, Any]:
            await ctx.effect(charge, {"run": ctx.run, "tag": state["tag"]})
            if state["left"] > 1:
                ctx.continue_as_new({**state, "left": state["left"] - 1})
            if state.get("fail"):
                raise lf.BusinessFailure(f"{state['tag']} fails")
            return {"tag": state["tag"], "run": ctx.run}


def test_a_new_run_after_a_chain_of_continued_runs_starts_clean(journal_url: str) -> None:
    """Goal: a start's new run of an instance that ended after continuing as new runs with the
    new start's input (not the last continued run's), its ended runs are history (one row
    each, with how the last one ended), and its own failure compensates only its own chain:
    the charges of the chain that SUCCEEDED stay (they were that outcome), never refunded.
    The continue-as-new oracle checks hold.

    Method: a chain of two runs that succeeds; a new run (run 3) whose one run fails."""
    from ledgerflow.testing import run_checks
    from ledgerflow.testing.oracle import Snapshot

    chain = Chain()

    async def main() -> None:
        async with lf.Engine(journal_url, chain.registry) as engine:
            first = await engine.start("chain", key="c", input={"tag": "a", "left": 2})
            await _work(engine)
            assert await engine.result(first.instance_id, timeout=5) == {"tag": "a", "run": 2}
            again = await engine.start(
                "chain", key="c", input={"tag": "b", "left": 1, "fail": True}, if_ended="new_run"
            )
            assert again.instance.run == 3
            await _work(engine)
            record = await engine.get(first.instance_id)
            assert record.status is lf.InstanceStatus.COMPENSATED
            assert record.first_run == 3
            runs = engine.store.runs(InstanceId(first.instance_id))
            assert [(r.run, r.ended) for r in runs] == [(1, None), (2, "SUCCEEDED")]
            effects = (await engine.detail(first.instance_id)).effects
            charges = {e.run: e.idempotency_key for e in effects if e.compensates is None}
            assert set(charges) == {3}  # the open run's journal; earlier runs' are history
            snapshot = Snapshot.of(engine.store)
            found = [
                *run_checks.one_open_run(snapshot),
                *run_checks.no_event_lost_or_duplicated_across_a_switch(snapshot),
            ]
            assert found == []
        assert len(chain.charged) == 3
        assert list(chain.refunded) == [charges[3]]

    asyncio.run(main())
