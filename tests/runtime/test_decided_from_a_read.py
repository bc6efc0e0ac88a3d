"""Every write a worker decides from an earlier read stays right when a conflicting write
commits between the read and the commit (docs/state-machines.md, "Decided from a read").

Each test lands the conflicting write (another connection's transaction, as another process
would make it) at the named fault point between the read and the commit that depends on it,
and checks that the commit's own condition decides: the event wins over the timeout, the
callback over the deadline, the cancel request over a new effect, and two claimers never both
win. The parks of waits, timers and callbacks are in test_lost_wakeups.py, the upgrade's in
tests/operators/test_upgrades.py. Both backends.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import WaitTimeoutError
from ledgerflow.model import detection
from ledgerflow.model.ids import InstanceId, WorkerId
from ledgerflow.runtime import faults
from ledgerflow.runtime.detection import scan
from ledgerflow.storage import open_store
from ledgerflow.storage.sql_attention import AttentionStore
from ledgerflow.storage.sql_claims import ClaimStore
from ledgerflow.storage.sql_inbox import InboxStore
from ledgerflow.storage.sql_starts import StartStore
from ledgerflow.testing import FakeClock
from lost_wakeups import ArriveAt


class Shop:
    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.registry = lf.Registry()
        mail = self.registry.add_participant(lf.Participant("mail", deduplicates=True))
        bank = self.registry.add_participant(lf.Participant("bank", deduplicates=True))

        @mail.effect(classification="forward-recovery-only")
        async def send(call: lf.EffectCall) -> dict[str, Any]:
            self.sent[call.idempotency_key] += 1
            return {"sent": call.payload}

        @bank.effect(classification="forward-recovery-only", completes_by_callback=60)
        async def transfer(call: lf.EffectCall) -> dict[str, Any]:
            return {"accepted": call.idempotency_key}

        @bank.lookup
        async def find(key: str, attempt: int) -> lf.LookupAnswer:
            return lf.LookupAnswer.unknown()

        @self.registry.workflow(name="patient", version=1)
        async def patient(ctx: lf.WorkflowContext, _: None) -> Any:
            try:
                return (await ctx.wait_for("go", timeout=60)).payload
            except WaitTimeoutError:
                return "timed out"

        @self.registry.workflow(name="pay", version=1)
        async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
            return await ctx.effect(transfer, {"amount": amount})

        @self.registry.workflow(name="notify", version=1)
        async def notify(ctx: lf.WorkflowContext, to: str) -> Any:
            return await ctx.effect(send, {"to": to})

        @self.registry.workflow(name="later", version=1)
        async def later(ctx: lf.WorkflowContext, to: str) -> Any:
            await ctx.sleep(60)
            return await ctx.effect(send, {"to": to})


class Scene:
    def __init__(self, url: str) -> None:
        self.url = url
        self.shop = Shop()
        self.clock = FakeClock()
        self.outside = lf.SyncEngine(url, self.shop.registry)

    def work(self, plan: faults.FaultPlan | None = None, *, after: float = 0.0) -> None:
        """A worker until nothing is due, ``after`` seconds from now on the scene's clock."""
        self.clock.advance(after)

        async def run() -> None:
            async with lf.Engine(self.url, self.shop.registry, clock=self.clock) as engine:
                worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
                await asyncio.wait_for(worker.run(until_nothing_due=True), timeout=60)

        faults.install(plan)
        try:
            asyncio.run(run())
        finally:
            faults.install(None)
        if isinstance(plan, ArriveAt):
            assert plan.arrived == 1, f"nothing arrived at {plan.point}"


@pytest.fixture
def scene(journal_url: str) -> Iterator[Scene]:
    scene = Scene(journal_url)
    yield scene
    scene.outside.close()


def test_an_event_committed_before_the_timeout_wins_it(scene: Scene) -> None:
    """The wait read no event and its timeout is due; "go" commits before the timeout's own
    commit, which proves no event is pending (NoPendingDelivery): the event wins."""
    iid = scene.outside.start("patient", key="t-1").instance_id
    scene.work()
    arrive = ArriveAt(
        "wait.before_timeout", lambda: scene.outside.signal(iid, "go", event_id="go-1", payload=7)
    )
    scene.work(arrive, after=61)
    assert scene.outside.result(iid, timeout=1) == 7
    assert scene.outside.delivery(iid, "go-1").state == "CONSUMED"


def test_a_callback_committed_before_the_deadline_wins_it(scene: Scene) -> None:
    """The deadline of an asynchronous effect passed with no callback read; the callback
    commits before the UNKNOWN outcome's commit, which proves none is pending: the effect is
    confirmed with the callback's evidence, never left in doubt."""
    iid = scene.outside.start("pay", key="p-1", input=5).instance_id
    scene.work()
    [effect] = scene.outside.detail(iid).effects
    key = effect.idempotency_key
    arrive = ArriveAt(
        "effect.before_deadline",
        lambda: scene.outside.complete_effect(key, applied=True, evidence={"ref": 3}),
    )
    scene.work(arrive, after=61)
    assert scene.outside.result(iid, timeout=1) == {"ref": 3}
    detail = scene.outside.detail(iid)
    [effect] = detail.effects
    assert (effect.state, effect.attempt) == (lf.EffectState.CONFIRMED, 1)
    # Never in doubt on the way: the deadline's UNKNOWN was refused, not settled afterwards.
    assert not [e for e in detail.timeline if e.to_state == "UNKNOWN"]


def test_a_cancel_committed_after_the_claim_refuses_the_next_intent(scene: Scene) -> None:
    """The claim read no cancel request; the request commits before the intent of the effect,
    whose commit holds no request arrived (NoCancelRequest): nothing is sent."""
    iid = scene.outside.start("notify", key="n-1", input="a@example.com").instance_id
    arrive = ArriveAt(
        "instance.after_claim", lambda: scene.outside.cancel(iid, reason="unsubscribed")
    )
    scene.work(arrive)
    record = scene.outside.get(iid)
    assert (record.status, record.cancel_outcome) == (lf.InstanceStatus.CANCELLED, "honoured")
    assert scene.outside.detail(iid).effects == []
    assert scene.shop.sent == Counter()


def test_a_timer_firing_past_a_cancel_request_starts_nothing_after_it(scene: Scene) -> None:
    """The timer is due and fires (its step completes: what started is finished); a cancel
    request committed after the claim's read still refuses the effect the timer leads to."""
    iid = scene.outside.start("later", key="l-1", input="b@example.com").instance_id
    scene.work()
    arrive = ArriveAt("instance.after_claim", lambda: scene.outside.cancel(iid, reason="moved"))
    scene.work(arrive, after=61)
    record = scene.outside.get(iid)
    assert (record.status, record.cancel_outcome) == (lf.InstanceStatus.CANCELLED, "honoured")
    assert scene.shop.sent == Counter()


def test_two_claimers_of_one_due_instance_never_both_win(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim decides from its read of what is claimable; a second claimer trying while the
    first is between that read and its claim waits (one writer, or the rows it locked) or skips
    the row, and never takes it too: the claim repeats its conditions in its own write."""
    first, second = open_store(journal_url), open_store(journal_url)
    try:
        started = lf.SyncEngine(first, Shop().registry).start("patient", key="c-1")
        read = threading.Event()
        other: list[Any] = []
        claimable = ClaimStore._claimable

        def claimable_then_race(self: Any, now: Any, limit: int, mine: Any) -> Any:
            rows = claimable(self, now, limit, mine)
            if self is first and not read.is_set():
                read.set()
                racer = threading.Thread(target=lambda: other.append(claim(second, "w-2")))
                racer.start()
                # The racer either waits for this transaction or skips its locked row; give
                # it the chance to commit first if it could (it must not).
                racer.join(timeout=0.5)
                other.append(racer)
            return rows

        def claim(store: Any, owner: str) -> list[Any]:
            return list(
                store.claim(owner=WorkerId(owner), now=2e9, lease_seconds=30, limit=5, serves=None)
            )

        monkeypatch.setattr(ClaimStore, "_claimable", claimable_then_race)
        mine = claim(first, "w-1")
        racer = next(o for o in other if isinstance(o, threading.Thread))
        racer.join(timeout=30)
        [theirs] = [o for o in other if isinstance(o, list)]
        assert [r.instance_id for r in mine] == [started.instance_id]
        assert theirs == []
        assert first.get_instance(started.instance_id).owner == "w-1"
    finally:
        first.close()
        second.close()


def _racing(method: Any, hook_on: Any, race: Any) -> list[Any]:
    """Run ``race`` in another thread (and connection) the first time ``hook_on`` (a store
    whose ``method`` is wrapped) has made its read; give it the chance to commit first if it
    could, then go on. Returns what ``race`` returned (or raised), once it ended."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(race())
        except Exception as exc:  # noqa: BLE001 - the racer's refusal is the test's evidence
            done.append(exc)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        if self is hook_on and not getattr(wrapped, "fired", False):
            wrapped.fired = True  # type: ignore[attr-defined]
            racer = threading.Thread(target=run)
            racer.start()
            racer.join(timeout=0.5)
            wrapped.racer = racer  # type: ignore[attr-defined]
        return result

    wrapped.done = done  # type: ignore[attr-defined]
    return [wrapped]


@pytest.mark.parametrize("theirs_payload", [1, 2])
def test_a_delivery_racing_the_same_event_id_is_kept_once(
    journal_url: str, monkeypatch: pytest.MonkeyPatch, theirs_payload: int
) -> None:
    """A delivery decides from its read of the inbox whether the event id is new; the same id
    sent by another client while the first is between that read and its insert is kept once:
    the other answer is a duplicate, or, for another payload, a refusal (ConcurrencyError),
    never a second "accepted" for an event that was not kept (found on PostgreSQL: the inbox
    was read before the instance's row was locked, and the insert's conflict went unseen)."""
    registry = Shop().registry
    first, second = lf.SyncEngine(journal_url, registry), lf.SyncEngine(journal_url, registry)
    try:
        iid = first.start("patient", key="d-1").instance_id
        [wrapped] = _racing(
            InboxStore._late,
            first.store,
            lambda: second.signal(iid, "go", event_id="go-1", payload=theirs_payload),
        )
        monkeypatch.setattr(InboxStore, "_late", wrapped)
        mine = first.signal(iid, "go", event_id="go-1", payload=1)
        wrapped.racer.join(timeout=30)
        [theirs] = wrapped.done
        assert mine.outcome is lf.DeliveryOutcome.ACCEPTED
        if theirs_payload == 1:
            assert theirs.outcome is lf.DeliveryOutcome.DUPLICATE
        else:
            assert isinstance(theirs, lf.errors.ConcurrencyError)
        [kept] = first.detail(iid).inbox
        assert (kept.event_id, kept.payload_value) == ("go-1", 1)
        entries = [e for e in first.detail(iid).timeline if e.subject == "inbox"]
        assert len(entries) == 1
    finally:
        first.close()
        second.close()


def test_a_start_racing_the_same_business_key_makes_one_instance(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start decides from its insert whether the business key is new and reads the instance
    back; a start of the same key with another input, racing it, is refused (ConcurrencyError),
    never a second instance or a silent answer for the other input."""
    registry = Shop().registry
    first, second = lf.SyncEngine(journal_url, registry), lf.SyncEngine(journal_url, registry)
    try:
        [wrapped] = _racing(
            StartStore._start_one,
            first.store,
            lambda: second.start("notify", key="s-1", input="other@example.com"),
        )
        monkeypatch.setattr(StartStore, "_start_one", wrapped)
        mine = first.start("notify", key="s-1", input="me@example.com")
        wrapped.racer.join(timeout=30)
        [theirs] = wrapped.done
        assert mine.created
        assert isinstance(theirs, lf.errors.ConcurrencyError)
        assert [i.input_value for i in first.list()] == ["me@example.com"]
    finally:
        first.close()
        second.close()


def test_a_flag_raised_during_a_scan_is_not_cleared_by_it(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan clears the open flags whose condition it no longer finds, decided from the open
    flags it read first: a flag another scan raises after that read (for a condition this scan
    may not see yet) is left open, never cleared unseen."""
    registry = Shop().registry
    mine, other = lf.SyncEngine(journal_url, registry), lf.SyncEngine(journal_url, registry)
    try:
        iid = mine.start("patient", key="f-1").instance_id
        open_flags = AttentionStore.open_flags

        def read_then_race(self: Any, instance_id: Any = None) -> Any:
            flags = open_flags(self, instance_id)
            if self is mine.store:
                other.store.raise_flag(
                    instance_id=InstanceId(iid),
                    reason_code=detection.STUCK_UNCLAIMED,
                    evidence="raised by another scan meanwhile",
                    detected_by="other-scan",
                    now=1.0,
                )
            return flags

        monkeypatch.setattr(AttentionStore, "open_flags", read_then_race)
        report = scan(mine.store, now=2.0)  # the instance is not due long: not stuck here
        monkeypatch.undo()
        assert report.cleared == ()
        assert [f.reason_code for f in mine.store.open_flags(InstanceId(iid))] == [
            detection.STUCK_UNCLAIMED
        ]
    finally:
        mine.close()
        other.close()
