"""Durable named locks (``async with ctx.lock(name)``) on both backends (``journal_url``).

A lock is held by one instance at a time (the second waits, WAITING, until the first leaves
the block), handed on first come first served, held across a wait and a worker's crash,
released by every final ending (a failure, a cancel, a compensation, an operator's forced
ending) and kept, visibly, by a parked holder; an acquiring with a timeout gives up and leaves
the queue. The participants' own records (who was inside a critical section when) are what
"never two holders" is checked against, and the oracle's lock checks look at the store.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
import lock_contention
from ledgerflow.errors import FencedOutError, LockTimeoutError, ReservedNameError
from ledgerflow.ledger.locks import LockRecord, ReleaseLock
from ledgerflow.ledger.records import Commit
from ledgerflow.model.ids import InstanceId, StepSeq, WorkerId
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.repair import RepairKind
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.repairs import RepairRequest, Repairs
from ledgerflow.operators.service import Operations
from ledgerflow.runtime import faults
from ledgerflow.runtime.faults import FaultPlan, FaultRule, SimulatedCrash
from ledgerflow.storage import open_store
from ledgerflow.storage.sql_locks import LockStore
from ledgerflow.testing.lock_checks import lock_violations
from processes import LEDGERFLOW, TESTS, WAIT_SECONDS_MAX, child_environment

QUICK = lf.RetryPolicy(attempts_max=1, backoff_initial=timedelta(milliseconds=1))
POLICY = """
[roles]
operator = ["force-terminal"]

[actors]
alice = ["operator"]
"""


class Bank:
    """Workflows that hold ``account:<n>`` around their critical section, and the
    participant's own record of who was inside it: ``inside[name]`` is how many are in it now,
    ``overlaps`` every time a second one entered."""

    def __init__(self) -> None:
        self.registry = lf.Registry()
        self.entered: list[str] = []
        self.inside: Counter[str] = Counter()
        self.overlaps: list[tuple[str, str]] = []
        self.refunded: list[str] = []
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @bank.compensation("refund", retry=QUICK)
        async def refund(call: lf.EffectCall) -> dict[str, Any]:
            self.refunded.append(call.original_key or "")
            return {}

        @bank.effect(classification="compensatable", retry=QUICK, compensation="refund")
        async def charge(call: lf.EffectCall) -> dict[str, Any]:
            return {"charged": call.payload}

        def enter(lock: str, who: str) -> str:
            self.inside[lock] += 1
            if self.inside[lock] > 1:
                self.overlaps.append((lock, who))
            self.entered.append(who)
            return who

        def leave(lock: str, who: str) -> str:
            self.inside[lock] -= 1
            return who

        @self.registry.workflow(name="guarded", version=1, defect_retry=QUICK)
        async def guarded(ctx: lf.WorkflowContext, job: dict[str, Any]) -> str:
            lock = job.get("lock", "account:42")
            async with ctx.lock(lock, timeout=job.get("timeout")):
                await ctx.step("enter", enter, lock, job["who"], checkpoint=True)
                if job.get("charge"):
                    await ctx.effect(charge, {"who": job["who"]})
                if job.get("wait"):
                    await ctx.wait_for("go")
                if job.get("fail") == "business":
                    raise lf.BusinessFailure("refused")
                if job.get("fail") == "defect":
                    raise RuntimeError("a bug inside the critical section")
                await ctx.step("leave", leave, lock, job["who"], checkpoint=True)
            return str(job["who"])

        @self.registry.workflow(name="nested", version=1)
        async def nested(ctx: lf.WorkflowContext, job: dict[str, Any]) -> str:
            async with ctx.lock(job["first"]):
                await ctx.wait_for("go")
                async with ctx.lock(job["second"]):
                    await ctx.step("enter", enter, job["second"], job["who"], checkpoint=True)
                    await ctx.step("leave", leave, job["second"], job["who"], checkpoint=True)
            return str(job["who"])

        @self.registry.workflow(name="patient", version=1)
        async def patient(ctx: lf.WorkflowContext, job: dict[str, Any]) -> str:
            try:
                async with ctx.lock(job["lock"], timeout=job["timeout"]):
                    return "granted"
            except LockTimeoutError as exc:
                return f"gave up at step {exc.seq}"


@pytest.fixture
def bank() -> Bank:
    return Bank()


def _worker(engine: lf.Engine) -> Any:
    return engine.worker(lease_seconds=5, poll_seconds=0.01)


async def _idle(engine: lf.Engine) -> None:
    await _worker(engine).run(until_idle=True)


def _one_lock(engine: lf.Engine) -> LockRecord | None:
    held = engine.store.locks()
    assert len(held) <= 1
    return held[0] if held else None


async def _start(engine: lf.Engine, key: str, **job: Any) -> InstanceId:
    started = await engine.start("guarded", key=key, input={"who": key, **job})
    return started.instance_id


def test_the_second_instance_waits_until_the_first_leaves_the_block(
    journal_url: str, bank: Bank
) -> None:
    """A holds the lock across a wait; B asks for it and is WAITING in the queue (the listing
    shows A as holder, B as the only waiter); A's release hands it to B in the same transaction;
    both end, nothing held, nobody was ever inside with another."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a", wait=True)
            await _idle(engine)
            b = await _start(engine, "b")
            await _idle(engine)
            held = _one_lock(engine)
            assert held is not None
            assert held.holder_instance == a
            assert not held.parked
            assert [w.instance_id for w in held.waiters] == [b]
            assert (await engine.get(b)).status is InstanceStatus.WAITING
            assert bank.entered == ["a"]
            await engine.signal(a, "go", event_id="go-a")
            await _idle(engine)
            assert bank.entered == ["a", "b"]
            assert [(await engine.get(i)).status for i in (a, b)] == [InstanceStatus.SUCCEEDED] * 2
            assert engine.store.locks() == []
            assert bank.overlaps == []
            assert lock_violations(engine.store) == []

    asyncio.run(main())


def test_waiters_are_granted_first_come_first_served(journal_url: str, bank: Bank) -> None:
    """Four waiters queue behind a holder in a known order: each release hands the lock to the
    earliest of those left, so they enter in the order they asked."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            holder = await _start(engine, "first", wait=True)
            await _idle(engine)
            order = ["w3", "w1", "w4", "w2"]
            for key in order:
                await _start(engine, key, wait=True)
                await _idle(engine)  # each queues before the next asks
            held = _one_lock(engine)
            assert held is not None
            assert [w.position for w in held.waiters] == sorted(w.position for w in held.waiters)
            now = holder
            for _ in order:
                await engine.signal(now, "go", event_id=f"go-{now}")
                await _idle(engine)
                held = _one_lock(engine)
                assert held is not None
                now = held.holder_instance
            await engine.signal(now, "go", event_id=f"go-{now}")
            await _idle(engine)
            assert bank.entered == ["first", *order]
            assert engine.store.locks() == []
            assert bank.overlaps == []

    asyncio.run(main())


def test_the_lock_is_held_across_a_worker_crash_inside_the_block(
    journal_url: str, bank: Bank
) -> None:
    """The worker dies inside A's critical section (before its second step): A still holds the
    lock and B still waits; the next worker takes A over once its lease lapses, A finishes and
    hands the lock to B. A replayed acquiring does not queue again."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a")
            b = await _start(engine, "b")
            faults.install(
                FaultPlan(
                    [
                        FaultRule(
                            point="step.before_execute",
                            action="crash",
                            match={"instance": "a", "seq": 3},
                        )
                    ]
                )
            )
            try:
                with pytest.raises(SimulatedCrash):
                    await engine.worker(lease_seconds=0.3, poll_seconds=0.01).run(until_idle=True)
            finally:
                faults.install(None)
            held = _one_lock(engine)
            assert held is not None
            assert held.holder_instance == a
            assert [w.instance_id for w in held.waiters] == [b]
        async with lf.Engine(journal_url, bank.registry) as engine:
            await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_idle=True)
            assert [(await engine.get(i)).status for i in (a, b)] == [InstanceStatus.SUCCEEDED] * 2
            assert engine.store.locks() == []
            steps = (await engine.detail(a)).steps
            acquiring = [s for s in steps if s.kind is StepKind.LOCK and s.name.startswith("lock:")]
            assert [s.status for s in acquiring] == [StepStatus.COMPLETED]
            assert bank.overlaps == []

    asyncio.run(main())


@pytest.mark.parametrize("ending", ["business", "cancel", "compensated"])
def test_every_final_ending_of_the_holder_hands_the_lock_on(
    journal_url: str, bank: Bank, ending: str
) -> None:
    """The holder ends FAILED (a business failure), CANCELLED (while it waits inside the
    block) or COMPENSATED (a charge refunded): the ending's transaction hands the lock to the
    waiter, which then runs to its end."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            job: dict[str, Any] = {
                "business": {"fail": "business"},
                "cancel": {"wait": True},
                "compensated": {"charge": True, "fail": "business"},
            }[ending]
            holder = await _start(engine, "holder", **job)
            await _idle(engine)
            waiter = await _start(engine, "waiter")
            if ending == "cancel":
                await _idle(engine)
                await engine.cancel(holder, reason="no longer needed")
            await _idle(engine)
            expected = {
                "business": InstanceStatus.FAILED,
                "cancel": InstanceStatus.CANCELLED,
                "compensated": InstanceStatus.COMPENSATED,
            }[ending]
            assert (await engine.get(holder)).status is expected
            assert (await engine.get(waiter)).status is InstanceStatus.SUCCEEDED
            assert bank.entered == ["holder", "waiter"]
            assert engine.store.locks() == []
            assert lock_violations(engine.store) == []

    asyncio.run(main())


def test_a_parked_holder_keeps_its_lock_visibly_until_an_operator_ends_it(
    journal_url: str, bank: Bank, tmp_path: Path
) -> None:
    """A defect inside the block parks the holder (MANUAL_INTERVENTION): the lock stays held,
    listed as held by a parked instance, and the waiter keeps waiting. An operator's forced
    ending (an audited repair) releases it in the repair's transaction and the waiter runs."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            holder = await _start(engine, "holder", fail="defect")
            await _idle(engine)
            waiter = await _start(engine, "waiter")
            await _idle(engine)
            assert (await engine.get(holder)).status is InstanceStatus.MANUAL_INTERVENTION
            held = _one_lock(engine)
            assert held is not None
            assert held.holder_instance == holder
            assert held.parked
            assert [w.instance_id for w in held.waiters] == [waiter]
            assert lock_violations(engine.store) == []
            policy = tmp_path / "authority.toml"
            policy.write_text(POLICY)
            store = open_store(journal_url)
            try:
                Repairs(store, Authority.from_file(policy)).apply(
                    RepairRequest(
                        kind=RepairKind.FORCE_TERMINAL,
                        instance_id=holder,
                        actor="alice",
                        reason="OPS-7: the account was checked by hand",
                        status=InstanceStatus.FAILED,
                    )
                )
            finally:
                store.close()
            held = _one_lock(engine)
            assert held is not None
            assert held.holder_instance == waiter
            await _idle(engine)
            assert (await engine.get(waiter)).status is InstanceStatus.SUCCEEDED
            assert engine.store.locks() == []

    asyncio.run(main())


def test_a_cancelled_waiter_leaves_the_queue_and_is_never_granted(
    journal_url: str, bank: Bank
) -> None:
    """B and C queue behind A; B is cancelled while it waits: its ending takes it out of the
    queue in the ending's transaction, so A's release goes to C, and B never entered."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a", wait=True)
            await _idle(engine)
            b = await _start(engine, "b")
            await _idle(engine)
            c = await _start(engine, "c")
            await _idle(engine)
            await engine.cancel(b, reason="the customer withdrew")
            await _idle(engine)
            assert (await engine.get(b)).status is InstanceStatus.CANCELLED
            held = _one_lock(engine)
            assert held is not None
            assert [w.instance_id for w in held.waiters] == [c]
            await engine.signal(a, "go", event_id="go-a")
            await _idle(engine)
            assert bank.entered == ["a", "c"]
            assert (await engine.get(c)).status is InstanceStatus.SUCCEEDED
            assert engine.store.locks() == []
            assert lock_violations(engine.store) == []

    asyncio.run(main())


def test_an_acquiring_that_times_out_leaves_the_queue(journal_url: str, bank: Bank) -> None:
    """While A holds the lock, B asks with a 0.2 s timeout: B parks WAITING until then, records
    the timeout (LockTimeoutError into its code) and leaves the queue in the same commit; A's
    later release finds nobody to hand the lock to."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a", wait=True)
            await _idle(engine)
            started = await engine.start(
                "patient", key="b", input={"lock": "account:42", "timeout": 0.2}
            )
            await _idle(engine)
            assert await engine.result(started.instance_id, timeout=30) == "gave up at step 1"
            held = _one_lock(engine)
            assert held is not None
            assert held.holder_instance == a
            assert held.waiters == ()
            await engine.signal(a, "go", event_id="go-a")
            await _idle(engine)
            assert engine.store.locks() == []

    asyncio.run(main())


def test_a_release_from_an_owner_that_lost_the_instance_is_refused(
    journal_url: str, bank: Bank
) -> None:
    """A holds the lock and waits (released, no owner); a commit that releases it from a
    worker at A's generation, as a zombie would send it, is fenced out by the store: the lock
    stays A's and B still waits."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a", wait=True)
            await _idle(engine)
            b = await _start(engine, "b")
            await _idle(engine)
            record = await engine.get(a)
            zombie = Commit(
                instance_id=a,
                owner=WorkerId("zombie"),
                generation=record.generation,
                writes=(ReleaseLock(name="account:42", seq=StepSeq(1), run=1),),
            )
            [refused] = engine.store.commit([zombie], now=time.time())
            assert isinstance(refused, FencedOutError)
            held = _one_lock(engine)
            assert held is not None
            assert held.holder_instance == a
            assert [w.instance_id for w in held.waiters] == [b]

    asyncio.run(main())


def test_a_lost_hand_over_is_listed_and_found_by_the_oracle(
    journal_url: str, bank: Bank, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the hand-over to the first waiter reverted (a release that frees the lock and
    wakes nobody), the listing shows the queue behind a lock nobody holds and the oracle's
    lock checks call it a lost hand-over: such a bug cannot hide in an idle-looking journal."""
    monkeypatch.setattr(LockStore, "_hand_on", lambda self, name, tenant, now: None)

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a", wait=True)
            await _idle(engine)
            b = await _start(engine, "b")
            await _idle(engine)
            await engine.signal(a, "go", event_id="go-a")
            await _idle(engine)
            assert (await engine.get(b)).status is InstanceStatus.WAITING
            [free] = engine.store.locks()
            assert free.holder_instance is None
            assert [w.instance_id for w in free.waiters] == [b]
            found = lock_violations(engine.store)
            assert [(v.invariant, v.instance_id) for v in found] == [("lock-free-with-waiters", b)]

    asyncio.run(main())


def test_a_cycle_of_waits_is_refused_to_the_instance_that_would_close_it(
    journal_url: str, bank: Bank
) -> None:
    """A holds x and B holds y; B asks for x and queues; A then asks for y, which would close
    the cycle: A's acquiring is answered LockDeadlockError (naming both hops) in its own
    transaction, A fails and its ending hands x to B, which finishes. No one waits for ever."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = (
                await engine.start(
                    "nested", key="a", input={"who": "a", "first": "x", "second": "y"}
                )
            ).instance_id
            b = (
                await engine.start(
                    "nested", key="b", input={"who": "b", "first": "y", "second": "x"}
                )
            ).instance_id
            await _idle(engine)
            await engine.signal(b, "go", event_id="go-b")
            await _idle(engine)
            assert (await engine.get(b)).status is InstanceStatus.WAITING  # queued for x
            await engine.signal(a, "go", event_id="go-a")
            await _idle(engine)
            ended = await engine.get(a)
            assert ended.status is InstanceStatus.FAILED
            assert "LF551" in (ended.reason or "") or "cycle" in (ended.reason or "")
            assert f"{b} holds y" in (ended.reason or "")
            assert (await engine.get(b)).status is InstanceStatus.SUCCEEDED
            assert bank.entered == ["b"]
            assert engine.store.locks() == []
            assert lock_violations(engine.store) == []

    asyncio.run(main())


def test_a_signal_may_not_forge_a_grant(journal_url: str, bank: Bank) -> None:
    """The grant's event name is reserved: a signal under it is refused before it is kept."""

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            iid = await _start(engine, "a")
            with pytest.raises(ReservedNameError):
                await engine.signal(iid, "lock-granted:account:42", event_id="forged")

    asyncio.run(main())


def test_many_instances_contending_for_few_locks_never_overlap(
    journal_url: str, bank: Bank
) -> None:
    """100 instances, 5 locks, three workers at once: no participant ever saw two instances
    inside one lock's section, every instance succeeded, and every lock is free at the end."""
    names = [f"account:{n}" for n in range(5)]

    async def main() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            ids = []
            for n, name in zip(range(100), itertools.cycle(names), strict=False):
                ids.append(await _start(engine, f"c-{n}", lock=name))
            workers = [engine.worker(lease_seconds=5, poll_seconds=0.01) for _ in range(3)]
            await asyncio.gather(*(w.run(until_idle=True) for w in workers))
            statuses = Counter([(await engine.get(i)).status for i in ids])
            assert statuses == Counter({InstanceStatus.SUCCEEDED: 100})
            assert sorted(bank.entered) == sorted(f"c-{n}" for n in range(100))
            assert bank.overlaps == []
            assert engine.store.locks() == []
            assert lock_violations(engine.store) == []

    asyncio.run(main())


def test_the_replay_checker_answers_lock_positions_from_the_journal(
    journal_url: str, bank: Bank
) -> None:
    """A history that took and released a lock, and one still queued for it, replay clean
    against the same code without acquiring anything (the replay's store refuses every write);
    code that now asks for another lock at that position diverges there."""

    async def main() -> tuple[InstanceId, InstanceId]:
        async with lf.Engine(journal_url, bank.registry) as engine:
            a = await _start(engine, "a", wait=True)
            await _idle(engine)
            b = await _start(engine, "b")
            await _idle(engine)
            return a, b

    a, b = asyncio.run(main())
    with Operations(journal_url) as operations:
        verdicts = {v.instance_id: v for v in operations.replay(bank.registry)}
    assert verdicts[a].compatible
    assert verdicts[b].compatible
    assert verdicts[a].replayed == 2  # the lock and the first step; the wait is open

    async def finish() -> None:
        async with lf.Engine(journal_url, bank.registry) as engine:
            await engine.signal(a, "go", event_id="go-a")
            await _idle(engine)

    asyncio.run(finish())
    with Operations(journal_url) as operations:
        done = {v.instance_id: v for v in operations.replay(bank.registry)}
    assert done[a].compatible
    assert done[a].replayed == 5  # lock, enter, wait, leave, unlock

    other = Bank()
    definition = other.registry.get("guarded", 1)

    async def renamed(ctx: lf.WorkflowContext, job: dict[str, Any]) -> str:
        async with ctx.lock("account:43"):
            return "renamed"

    object.__setattr__(definition, "function", renamed)
    with Operations(journal_url) as operations:
        changed = {v.instance_id: v for v in operations.replay(other.registry)}
    assert not changed[a].compatible
    assert changed[a].position == 1
    assert "account:43" in (changed[a].asks or "")


# -- real worker processes SIGKILLed among 100 contenders ----------------------------------------

KILL_POINTS = [
    {"point": "step.before_execute", "match": {"seq": 2}},  # granted, nothing entered yet
    {"point": "step.after_execute", "match": {"seq": 3}},  # left the section, not journaled
    {"point": "lock.before_release"},  # the block is left, the release not yet durable
    {"point": "wait.before_suspend"},  # queued, the park not yet durable
    {"point": "step.after_execute", "match": {"seq": 2}},  # inside, the entry not journaled
]


def _contender(url: str, log: Path, *, kill: dict[str, Any] | None) -> subprocess.Popen[bytes]:
    command = [
        *LEDGERFLOW,
        *("worker", "lock_contention:registry", "--db", url),
        *("--lease-seconds", "1", "--poll-seconds", "0.01", "--until-idle"),
    ]
    env = child_environment(TESTS)
    env.pop("LEDGERFLOW_FAULTS", None)
    if kill is not None:
        env["LEDGERFLOW_FAULTS"] = json.dumps([{**kill, "action": "kill"}])
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=out)


def _overlaps(lines: list[str]) -> list[str]:
    """Every entry into a lock's section while another instance was inside it, by the
    participant's log (a repeated entry or exit of the same instance is a step run again)."""
    inside: dict[str, set[str]] = {}
    found = []
    for line in lines:
        what, lock, who = line.split()
        holders = inside.setdefault(lock, set())
        if what == "enter":
            if holders - {who}:
                found.append(f"{who} entered {lock} while {sorted(holders)} were inside")
            holders.add(who)
        else:
            holders.discard(who)
    return found


@pytest.mark.slow
def test_a_hundred_contenders_under_sigkills_never_overlap(
    journal_url: str, tmp_path: Path
) -> None:
    """100 instances contend for 5 locks while real worker processes are SIGKILLed at every
    point of a lock's life (granted, inside, leaving, releasing, queued): each of five rounds
    starts 20 more and runs a worker killed at that round's point, then two workers at once
    that take over what it held once its lease lapses. The participant's own log shows no two
    instances ever inside one lock's section, every instance succeeded and entered once at
    least, and every lock is free at the end (the oracle's lock checks find nothing)."""
    participant_log = tmp_path / "sections.log"
    outside = lf.SyncEngine(journal_url, lock_contention.registry)
    try:
        ids: list[str] = []
        killed = []
        for round_, kill in enumerate([*KILL_POINTS, None, None, None]):
            for n in range(20 * round_, 20 * round_ + 20) if kill is not None else ():
                job = {"lock": f"account:{n % 5}", "who": f"c-{n}", "log": str(participant_log)}
                ids.append(outside.start("contend", key=f"c-{n}", input=job).instance_id)
            if kill is not None:  # alone, so that it is the one to reach its point
                doomed = _contender(journal_url, tmp_path / "workers.log", kill=kill)
                killed.append(doomed.wait(timeout=WAIT_SECONDS_MAX * 4) == -signal.SIGKILL)
            workers = [_contender(journal_url, tmp_path / "workers.log", kill=None) for _ in "ab"]
            assert [w.wait(timeout=WAIT_SECONDS_MAX * 4) for w in workers] == [0, 0]
            if kill is None and all(outside.get(i).status in TERMINAL_STATUSES for i in ids):
                break
        assert killed == [True] * len(KILL_POINTS)
        statuses = Counter(outside.get(i).status for i in ids)
        assert statuses == Counter({InstanceStatus.SUCCEEDED: 100})
        lines = participant_log.read_text().splitlines()
        assert _overlaps(lines) == []
        assert {line.split()[2] for line in lines} == {f"c-{n}" for n in range(100)}
        assert outside.store.locks() == []
        assert lock_violations(outside.store) == []
    finally:
        outside.close()
