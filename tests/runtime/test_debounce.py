"""Debounced starts by business key (issue 27): a burst of starts gives one run with the last
input, no later than the window's first start plus its longest wait; a start that races the
worker's claim either collapses before it or is decided by the key's rules after it, never a
second run nor a silently dropped input; bad combinations are refused. Fake clock, both
backends."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ledgerflow as lf
from ledgerflow.errors import KeyInUseError, PayloadError
from ledgerflow.ledger.records import TimelineEntry
from ledgerflow.model.codec import JSON
from ledgerflow.model.debounce import replaced_input
from ledgerflow.model.ids import InstanceId
from ledgerflow.operators.service import AuditQuery, Operations
from ledgerflow.runtime import faults
from ledgerflow.testing import FakeClock
from ledgerflow.testing.debounce_checks import EARLY, STALE_INPUT, debounce_held
from lost_wakeups import ArriveAt
from planted_sql import plant_sql

WINDOW = {"debounce_seconds": 5.0, "debounce_max_seconds": 12.0}


def _registry(seen: list[Any]) -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="reindex", version=1)
    async def reindex(ctx: lf.WorkflowContext, value: Any) -> Any:
        # What the run's code received, once per run (a replay would not append again).
        await ctx.step("received", lambda: seen.append(value) or value)
        return value

    return registry


class Scene:
    """A fake-clock engine on the journal, with a worker run until nothing is due."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[Any] = []
        self.registry = _registry(self.seen)
        self.clock = FakeClock(autojump=False)

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    async def start(self, value: Any, **options: Any) -> lf.Started:
        async with lf.Engine(self.url, self.registry, clock=self.clock) as engine:
            return await engine.start("reindex", key="doc-1", input=value, **{**WINDOW, **options})

    async def work(self) -> None:
        async with lf.Engine(self.url, self.registry, clock=self.clock) as engine:
            worker = engine.worker(lease_seconds=30, poll_seconds=0.01)
            await asyncio.wait_for(worker.run(until_nothing_due=True), timeout=20)

    async def work_with_a_late_start(self, refused: list[Exception]) -> None:
        """A worker whose claim is followed, before the run's first commit, by a debounced
        start of input "late" from another connection (refused ones kept in ``refused``)."""

        def arrive() -> None:
            with lf.SyncEngine(self.url, self.registry) as other:
                try:
                    other.start("reindex", key="doc-1", input="late", **WINDOW)  # type: ignore[arg-type]
                except KeyInUseError as exc:
                    refused.append(exc)

        faults.install(ArriveAt("instance.after_claim", arrive, key="doc-1"))
        try:
            await self.work()
        finally:
            faults.install(None)

    async def state(self, iid: str) -> tuple[lf.InstanceRecord, list[TimelineEntry]]:
        async with lf.Engine(self.url, self.registry, clock=self.clock) as engine:
            return await engine.get(iid), await engine.store_thread.timeline(InstanceId(iid))


@pytest.fixture
def scene(journal_url: str) -> Iterator[Scene]:
    yield Scene(journal_url)
    faults.install(None)


def _oracle(record: lf.InstanceRecord, timeline: list[TimelineEntry], seen: Any) -> list[str]:
    seen_text = {record.instance_id: JSON.encode(seen)}
    return [str(v) for v in debounce_held([record], {record.instance_id: timeline}, seen_text)]


def test_starts_within_the_window_give_one_run_with_the_last_input(scene: Scene) -> None:
    """Goal: five starts of one key, each 2 s after the last (window 5 s, longest wait 12 s),
    run the workflow once, with the fifth input, no earlier than 5 s after the last start...
    except that the longest wait from the first start caps it at 12 s.

    Method: the first answer is created, the other four debounced into it; a worker between
    the starts runs nothing; the timeline keeps every replaced input in order; the clock
    moves to the capped due time and the run takes input 5; the oracle's checks hold."""

    async def scenario() -> None:
        first = await scene.start(1)
        assert (first.created, first.debounced) == (True, False)
        assert first.instance.status is lf.InstanceStatus.SCHEDULED
        opened_at = scene.clock.now()
        for n in range(2, 6):
            scene.clock.advance(2)
            later = await scene.start(n)
            assert (later.created, later.debounced) == (False, True), n
            assert later.instance_id == first.instance_id
            assert later.instance.available_at == min(scene.clock.now() + 5, opened_at + 12)
            await scene.work()
            assert scene.seen == []
        record, timeline = await scene.state(first.instance_id)
        assert record.reason_code == "debounced"
        assert "4 later start(s) collapsed" in str(record.reason)
        lines = [e for e in timeline if e.subject == "debounce"]
        assert [(e.from_state, e.to_state) for e in lines] == [
            (None, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"),
        ]  # fmt: skip
        assert [replaced_input(e.detail) for e in lines[1:]] == ["1", "2", "3", "4"]
        # The last start (at +8) would be due at +13; the longest wait caps it at +12.
        scene.clock.advance(12 - 8 - 0.5)
        await scene.work()
        assert scene.seen == []
        scene.clock.advance(0.5)
        await scene.work()
        assert scene.seen == [5]
        record, timeline = await scene.state(first.instance_id)
        assert record.status is lf.InstanceStatus.SUCCEEDED
        assert _oracle(record, timeline, 5) == []

    scene.run(scenario())


def test_a_start_after_the_longest_wait_cannot_delay_the_run(scene: Scene) -> None:
    """Goal: once the window's longest wait has passed, a start still collapses its input
    into the pending instance (it has not begun) but cannot move its time: it stays due.

    Method: no worker runs while the clock passes the 12 s cap; a start at +13 answers
    debounced with the instance due at +12; the run takes that start's input."""

    async def scenario() -> None:
        first = await scene.start("a")
        opened_at = scene.clock.now()
        scene.clock.advance(13)
        late = await scene.start("b")
        assert late.debounced is True
        assert late.instance.available_at == opened_at + 12
        await scene.work()
        assert scene.seen == ["b"]
        record, timeline = await scene.state(first.instance_id)
        assert _oracle(record, timeline, "b") == []

    scene.run(scenario())


def test_a_start_after_the_run_began_follows_the_key_rules(scene: Scene) -> None:
    """Goal: a debounced start that comes once the run has begun is a start under a used key:
    another input is refused (KeyInUseError, never dropped silently) while the run is in
    flight or ended; ``if_ended="new_run"`` opens a new window for the key's next run.

    Method: the run of input 1 ends; a debounced start of 2 is refused; one with
    if_ended="new_run" creates run 2 SCHEDULED for its own window, and a start of 3 in
    that window collapses into it; run 2 takes 3."""

    async def scenario() -> None:
        first = await scene.start(1)
        scene.clock.advance(5)
        await scene.work()
        assert scene.seen == [1]
        with pytest.raises(KeyInUseError):
            await scene.start(2)
        again = await scene.start(2, if_ended="new_run")
        assert (again.created, again.debounced, again.instance.run) == (True, False, 2)
        assert again.instance.status is lf.InstanceStatus.SCHEDULED
        scene.clock.advance(1)
        assert (await scene.start(3, if_ended="new_run")).debounced is True
        scene.clock.advance(5)
        await scene.work()
        assert scene.seen == [1, 3]
        record, timeline = await scene.state(first.instance_id)
        assert _oracle(record, timeline, 3) == []

    scene.run(scenario())


def test_a_cancelled_pending_start_takes_no_more_inputs(scene: Scene) -> None:
    """Goal: once a cancel request stands on the pending instance, a debounced start no longer
    collapses into it (it would move the time the cancel made due): another input is refused,
    and the instance ends CANCELLED with no step run.

    Method: start, cancel, a debounced start of another input, a worker."""

    async def scenario() -> None:
        first = await scene.start(1)
        async with lf.Engine(scene.url, scene.registry, clock=scene.clock) as engine:
            await engine.cancel(first.instance_id, reason="the document was deleted")
        with pytest.raises(KeyInUseError):
            await scene.start(2)
        await scene.work()
        record, _ = await scene.state(first.instance_id)
        assert record.status is lf.InstanceStatus.CANCELLED
        assert (scene.seen, JSON.decode(record.input)) == ([], 1)

    scene.run(scenario())


def test_a_debounced_start_of_another_version_is_refused(scene: Scene) -> None:
    """Goal: a collapse takes a new input, never a new version: a debounced start of v2 on a
    pending v1 instance is refused (KeyInUseError) and the instance keeps v1 and its input."""

    @scene.registry.workflow(name="reindex", version=2)
    async def reindex_v2(ctx: lf.WorkflowContext, value: Any) -> Any:
        return value

    async def scenario() -> None:
        first = await scene.start(1, version=1)
        with pytest.raises(KeyInUseError):
            await scene.start(2, version=2)
        record, _ = await scene.state(first.instance_id)
        assert (record.workflow_version, JSON.decode(record.input)) == (1, 1)

    scene.run(scenario())


def test_a_start_racing_the_claim_never_runs_twice_nor_drops_its_input(scene: Scene) -> None:
    """Goal: a debounced start that commits between a worker's claim and the run's first
    commit finds the instance claimed: it does not collapse (the worker read the input it
    runs) and is refused loudly; the run takes the input it was claimed with, once.

    Method: another connection's debounced start lands at ``instance.after_claim``; it
    raises KeyInUseError there; one run, with the first input; the oracle holds."""
    refused: list[Exception] = []

    async def scenario() -> None:
        first = await scene.start("early")
        scene.clock.advance(5)
        await scene.work_with_a_late_start(refused)
        assert len(refused) == 1
        assert scene.seen == ["early"]
        record, timeline = await scene.state(first.instance_id)
        assert [e.to_state for e in timeline if e.subject == "instance"].count("RUNNING") == 1
        assert _oracle(record, timeline, "early") == []

    scene.run(scenario())


def test_the_oracle_finds_a_collapse_into_a_claimed_run(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: the debounce checks can fail. Planted defect: the collapse's update without its
    "never claimed" condition (owner IS NULL), so a start landing after the claim rewrites
    the input of a run that already read another.

    Method: as the race test, with the defect; the late start is answered (no refusal), the
    run received the early input, and the oracle reports debounce-ran-stale-input."""
    plant_sql(monkeypatch, "debounce_start", "AND owner IS NULL", "")
    refused: list[Exception] = []

    async def scenario() -> None:
        first = await scene.start("early")
        scene.clock.advance(5)
        await scene.work_with_a_late_start(refused)
        assert refused == [], "the defect should have let the late start collapse"
        assert scene.seen == ["early"]
        record, timeline = await scene.state(first.instance_id)
        found = _oracle(record, timeline, "early")
        assert found, "the planted defect went unseen"
        assert all(v.startswith(STALE_INPUT) for v in found), found

    scene.run(scenario())


def test_the_oracle_finds_a_run_claimed_before_its_moved_time(scene: Scene) -> None:
    """Goal: debounce-early can fail: a timeline whose claim comes before the due time the
    last start set is reported (the timeline as a store that ignored the moved time would
    leave it).

    Method: a real window's timeline with the claim's time moved back before its due."""

    async def scenario() -> None:
        first = await scene.start(1)
        scene.clock.advance(5)
        await scene.work()
        record, timeline = await scene.state(first.instance_id)
        bent = [
            dataclasses.replace(e, at=e.at - 1) if e.subject == "owner" else e for e in timeline
        ]
        found = [str(v) for v in debounce_held([record], {record.instance_id: bent})]
        [early] = found
        assert early.startswith(EARLY), early

    scene.run(scenario())


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"debounce_seconds": 5, "start_in": 10}, "takes no start_at or start_in"),
        ({"debounce_seconds": -1}, "positive number of seconds"),
        ({"debounce_seconds": 0}, "positive number of seconds"),
        ({"debounce_seconds": 5, "debounce_max_seconds": 2}, "is shorter than"),
        ({"debounce_max_seconds": 5}, "needs debounce_seconds"),
        ({"debounce_seconds": "5s"}, "number of seconds"),
    ],
)
def test_bad_debounce_combinations_are_refused(
    scene: Scene, options: dict[str, Any], words: str
) -> None:
    """Goal: each combination that cannot be meant is a PayloadError naming it, and nothing is
    started."""

    async def scenario() -> None:
        async with lf.Engine(scene.url, scene.registry, clock=scene.clock) as engine:
            with pytest.raises(PayloadError, match=words):
                await engine.start("reindex", key="bad", input=1, **options)
            assert await engine.list(limit=5) == []

    scene.run(scenario())


def test_a_start_with_a_signal_or_an_update_takes_no_debounce(scene: Scene) -> None:
    """Goal: signal_with_start and update_with_start refuse a debounce (PayloadError) rather
    than deliver to an instance whose input a later start would replace."""

    async def scenario() -> None:
        async with lf.Engine(scene.url, scene.registry, clock=scene.clock) as engine:
            with pytest.raises(PayloadError, match="signal_with_start takes no debounce"):
                await engine.signal_with_start(
                    "reindex", key="s", signal="go", event_id="e", debounce_seconds=5
                )
            with pytest.raises(PayloadError, match="update_with_start takes no debounce"):
                await engine.update_with_start(
                    "reindex", key="u", update="u", update_id="u-1", debounce_seconds=5
                )
            assert await engine.list(limit=5) == []

    scene.run(scenario())


def test_concurrent_debounced_starts_of_one_key_collapse_into_one_chain(scene: Scene) -> None:
    """Goal: starts of one key from many connections at once (their own transactions) and
    from one engine's group commit (one transaction) each either create the instance or
    collapse into it -- none refused, none lost: the timeline's lines are numbered 1..n, and
    the inputs they replaced plus the instance's input are every input asked for, once each.

    Method: 6 threads with a SyncEngine each, 4 starts apiece, then 8 starts gathered on one
    Engine; read the timeline back."""
    answers: list[lf.Started] = []
    errors: list[BaseException] = []

    def caller(n: int) -> None:
        with lf.SyncEngine(scene.url, scene.registry) as engine:
            for m in range(4):
                try:
                    answers.append(
                        engine.start("reindex", key="doc-1", input=f"t{n}-{m}", **WINDOW)  # type: ignore[arg-type]
                    )
                except BaseException as exc:  # noqa: BLE001 -- reported below, whatever it is
                    errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    async def gathered() -> None:
        async with lf.Engine(scene.url, scene.registry) as engine:
            answers.extend(
                await asyncio.gather(
                    *(
                        engine.start("reindex", key="doc-1", input=f"g{m}", **WINDOW)  # type: ignore[arg-type]
                        for m in range(8)
                    )
                )
            )

    scene.run(gathered())
    assert errors == []
    assert len(answers) == 32
    assert sum(a.created for a in answers) == 1
    assert sum(a.debounced for a in answers) == 31
    record, timeline = scene.run(scene.state(answers[0].instance_id))
    lines = [e for e in timeline if e.subject == "debounce"]
    assert [e.to_state for e in lines] == [str(n) for n in range(1, 33)]
    replaced = [JSON.decode(str(replaced_input(e.detail))) for e in lines[1:]]
    asked = {f"t{n}-{m}" for n in range(6) for m in range(4)} | {f"g{m}" for m in range(8)}
    assert sorted([*replaced, JSON.decode(record.input)]) == sorted(asked)


def test_a_start_in_the_callers_transaction_debounces_too(tmp_path: Path) -> None:
    """Goal: ``engine.within(conn).start(..., debounce_seconds=)`` collapses into the key's
    pending instance in the caller's own transaction, audited as applied under its actor.

    Method: a debounced start, then one inside a sqlite3 transaction on the journal file."""
    path = tmp_path / "journal.db"
    registry = _registry([])

    async def scenario() -> None:
        async with lf.Engine(f"sqlite:///{path}", registry) as engine:
            await engine.start("reindex", key="doc-1", input=1, **WINDOW)  # type: ignore[arg-type]
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                tx = engine.within(conn, actor="service:docs")
                later = await tx.start("reindex", key="doc-1", input=2, **WINDOW)  # type: ignore[arg-type]
                conn.execute("COMMIT")
            finally:
                conn.close()
            await tx.committed()
            assert (later.created, later.debounced) == (False, True)
            assert JSON.decode((await engine.get(later.instance_id)).input) == 2
        with Operations(f"sqlite:///{path}") as operations:
            [record] = [
                r for r in operations.audit(AuditQuery(limit=10)) if r.actor == "service:docs"
            ]
            assert (record.kind, record.outcome) == ("start", "applied")

    asyncio.run(scenario())
