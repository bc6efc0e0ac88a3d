"""The participant kit against real databases: a SQLite file and the PostgreSQL server.

The property test drives one kit through random interleavings of originals, repeats, lookups,
late originals, compensations (under their own key, and wrongly under the original's) and
business writes that crash or refuse, and checks each answer and the database after each step
against a model of the protocol: nothing applied twice, nothing applied at an attempt a "not
applied" fenced, a repeat answered with the first receipt, and a business write committed if
and only if its key record is.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit_databases import Database, make_database, mark

from ledgerflow.errors import EffectRejectedError
from ledgerflow.model.effect import LookupAnswer, LookupVerdict
from ledgerflow.participant import Applied, Kit, KitRequest, Precondition, Refused, handle_message
from ledgerflow.participant.remote import idempotency_key_header, read_idempotency_key_header

WAIT_SECONDS = 30.0
_namespaces = count()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    database = make_database(request.param, request.node.nodeid, tmp_path)
    yield database
    database.close()


class CrashError(Exception):
    """A business write that fails after writing: its write must not survive."""


def write(behaviour: str = "ok") -> Callable[[Any, KitRequest], Any]:
    """A business write inserting one row; then crashing or refusing, as ``behaviour`` says."""

    def do(db: Any, request: KitRequest) -> Any:
        m = mark(db)
        kind = "compensation" if request.original_key else "effect"
        db.execute(
            f"INSERT INTO business (namespace, key, kind, attempt) VALUES ({m}, {m}, {m}, {m})",
            (request.effect_id or "", request.key, kind, request.attempt),
        )
        if behaviour == "crash":
            raise CrashError(request.key)
        if behaviour == "refuse":
            raise EffectRejectedError("sold out", error_code="sold_out", retryable=False)
        return {"key": request.key, "attempt": request.attempt, "kind": kind}

    return do


# The kit's clock in the property test: each step one second later, a purge a retention later.
RETENTION = timedelta(days=1)
SKEW_SECONDS = 5.0
BEGAN = 1000.0


@dataclass
class Model:
    """What the protocol says each key's state is."""

    receipts: dict[str, Any] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    # Every business write that committed, forgotten keys' too: (key, kind, attempt).
    applications: list[tuple[str, str, int]] = field(default_factory=list)
    # When each key was first sent (its first request or lookup), on the kit's clock.
    first_sent: dict[str, float] = field(default_factory=dict)
    now: float = BEGAN
    # Since when the kit's record is complete: since it was made, until a purge raises it.
    watermark: float = BEGAN


ORIGINALS = ["k0", "k1", "k2"]
KEYS = [*ORIGINALS, *(f"compensate:{k}" for k in ORIGINALS)]
attempts = st.integers(min_value=1, max_value=4)
behaviours = st.sampled_from(["ok", "ok", "crash", "refuse"])
steps = st.one_of(
    st.tuples(st.just("apply"), st.sampled_from(ORIGINALS), attempts, behaviours),
    st.tuples(st.just("compensate"), st.sampled_from(ORIGINALS), attempts, behaviours),
    st.tuples(st.just("compensate-under-original"), st.sampled_from(ORIGINALS), attempts),
    st.tuples(st.just("original-under-compensation"), st.sampled_from(ORIGINALS), attempts),
    st.tuples(st.just("lookup"), st.sampled_from(KEYS), attempts, st.booleans()),
    st.tuples(st.just("purge"), st.just("")),
)


def _expect_apply(model: Model, key: str, kind: str, attempt: int, behaviour: str) -> Any:
    """The answer the protocol demands, updating the model when it applies."""
    if model.fences.get(key, 0) >= attempt:
        return ("refused", "fenced")
    if key in model.receipts:
        if model.kinds[key] != kind:
            return ("refused", "key_used_by_other_kind")
        return ("repeat", model.receipts[key])
    if behaviour == "crash":
        return ("crash",)
    if behaviour == "refuse":
        return ("refused", "sold_out")
    model.receipts[key] = {"key": key, "attempt": attempt, "kind": kind}
    model.kinds[key] = kind
    model.applications.append((key, kind, attempt))
    return ("first", model.receipts[key])


def _answer(
    kit: Kit[Any], namespace: str, key: str, attempt: int, behaviour: str, original: str | None
) -> Any:
    request = KitRequest(
        key=key,
        attempt=attempt,
        operation="op",
        payload={"n": 1},
        original_key=original,
        effect_id=namespace,
    )
    try:
        outcome = kit.apply_request(request, write(behaviour))
    except CrashError:
        return ("crash",)
    if isinstance(outcome, Refused):
        return ("refused", outcome.error_code)
    return ("first" if outcome.first else "repeat", outcome.receipt)


def _vouches(model: Model, key: str, sent_at: float | None) -> bool:
    """Whether the kit may answer "not applied" for a key it has no record of: first sent
    after its watermark (less the skew), or with no sent time while it never purged."""
    if sent_at is None:
        return model.watermark == BEGAN
    return sent_at - SKEW_SECONDS >= model.watermark


def _purge(kit: Kit[Any], model: Model) -> None:
    # A retention later, every key so far is older than the cutoff: all are forgotten.
    model.now += RETENTION.total_seconds() + 1
    cutoff = model.now - RETENTION.total_seconds()
    kit.purge()
    model.watermark = cutoff
    model.receipts.clear()
    model.kinds.clear()
    model.fences.clear()


def _run_step(kit: Kit[Any], namespace: str, model: Model, step: tuple[Any, ...]) -> None:
    kind, original = step[0], step[1]
    model.now += 1
    if kind == "purge":
        _purge(kit, model)
        return
    if kind == "lookup":
        _, key, attempt, with_sent_at = step
        sent_at = model.first_sent.setdefault(key, model.now) if with_sent_at else None
        got = kit.lookup(key, attempt, sent_at=sent_at)
        if key in model.receipts:
            assert got == LookupAnswer.applied(model.receipts[key]), step
        elif key in model.fences or _vouches(model, key, sent_at):
            assert got == LookupAnswer.not_applied(), step
            model.fences[key] = max(model.fences.get(key, 0), attempt)
        else:
            # It may have forgotten the key: unknown, with why, and nothing fenced.
            assert (got.verdict, bool(got.reason)) == (LookupVerdict.UNKNOWN, True), step
        return
    sent = original if kind in ("apply", "compensate-under-original") else f"compensate:{original}"
    model.first_sent.setdefault(sent, model.now)
    if kind == "compensate-under-original":
        got = _answer(kit, namespace, original, step[2], "ok", original)
        assert got == ("refused", "compensation_key_is_original"), step
        return
    if kind == "original-under-compensation":
        key = f"compensate:{original}"
        expected = _expect_apply(model, key, "effect", step[2], "ok")
        assert _answer(kit, namespace, key, step[2], "ok", None) == expected, step
        return
    attempt, behaviour = step[2], step[3]
    if kind == "apply":
        key, kind_of, given_original = original, "effect", None
    else:
        key, kind_of, given_original = f"compensate:{original}", "compensation", original
    expected = _expect_apply(model, key, kind_of, attempt, behaviour)
    assert _answer(kit, namespace, key, attempt, behaviour, given_original) == expected, step


def _check_database(database: Database, namespace: str, model: Model) -> None:
    """Each application the model counts has exactly one business row (a key forgotten by a
    purge and sent again applies again); nothing else has any (a crashed or refused write
    rolled back with its key record); the kit records exactly the keys it remembers."""
    rows = database.rows(
        "SELECT key, kind, attempt FROM business WHERE namespace = ? ORDER BY key, attempt",
        namespace,
    )
    assert sorted(rows) == sorted(model.applications)
    recorded = database.rows(
        "SELECT key FROM ledgerflow_kit_keys WHERE namespace = ? AND receipt IS NOT NULL "
        "ORDER BY key",
        namespace,
    )
    assert [key for (key,) in recorded] == sorted(model.receipts)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=st.lists(steps, min_size=1, max_size=25))
def test_interleavings_never_apply_twice_nor_after_a_fence(
    database: Database, script: list[tuple[Any, ...]]
) -> None:
    """Goal: whatever the order of originals, repeats, lookups, late originals, compensations,
    failing business writes and purges, the kit keeps the protocol, and never answers "not
    applied" for a key it may have forgotten.

    Method: each example runs a random script against a fresh namespace of one kit (a real
    SQLite file or PostgreSQL schema) on a clock the test moves, and a model: every answer
    equals the model's (a repeat gets the first receipt; an attempt <= a not-applied lookup's
    is refused ``fenced``; a compensation under its original's key, or a key of the other kind,
    is refused; after a purge, a lookup of a key it has no record of first sent before the
    watermark, less the skew, or naming no sent time, answers unknown and fences nothing), and
    after each step the business table and the kit's records hold exactly the model's
    applications.
    """
    namespace = f"n{next(_namespaces)}"
    model = Model()
    kit = database.kit(
        namespace,
        retention=RETENTION,
        clock=lambda: model.now,
        clock_skew=timedelta(seconds=SKEW_SECONDS),
    )
    try:
        for step in script:
            _run_step(kit, namespace, model, step)
            _check_database(database, namespace, model)
    finally:
        kit.close()


def test_a_failure_inside_the_business_write_leaves_neither_write(database: Database) -> None:
    """Goal: the business write and the key record commit together or not at all.

    Method: a write that inserts its row and then raises: the error propagates, the business
    table has no row and the kit no record; the same key then applies once, as a first.
    """
    kit = database.kit("atomic")
    request = KitRequest(key="a-1", attempt=1, operation="op", effect_id="atomic")
    with pytest.raises(CrashError):
        kit.apply_request(request, write("crash"))
    assert database.rows("SELECT count(*) FROM business WHERE key = 'a-1'") == [(0,)]
    assert database.rows("SELECT count(*) FROM ledgerflow_kit_keys WHERE key = 'a-1'") == [(0,)]
    outcome = kit.apply_request(request, write())
    assert isinstance(outcome, Applied)
    assert outcome.first
    assert database.rows("SELECT count(*) FROM business WHERE key = 'a-1'") == [(1,)]


def test_a_key_sent_for_another_operation_or_payload_is_refused(database: Database) -> None:
    """Goal: a repeat is answered only when it is the same request, never for another one.

    Method: apply a key, then send it again with another payload and another operation:
    both refused ``key_reused`` (not retryable), the first receipt untouched."""
    kit = database.kit("reuse")
    first = kit.apply("r-1", attempt=1, operation="op", payload={"n": 1}, do=write())
    assert isinstance(first, Applied)
    for operation, payload in (("op", {"n": 2}), ("other", {"n": 1})):
        again = kit.apply("r-1", attempt=2, operation=operation, payload=payload, do=write())
        assert again == Refused("key_reused", False, again.message)  # type: ignore[union-attr]
    assert kit.lookup("r-1", 3) == LookupAnswer.applied(first.receipt)


def test_retention_is_declared_and_purge_forgets_only_older_keys(database: Database) -> None:
    """Goal: keys are kept for the declared window and forgotten after it, fences too.

    Method: a kit on a clock we set: apply one key and fence another at t=1000, apply a third
    at t=5000; the declaration states the 3600 s window; purge at t=5000 forgets the first two
    (the fenced key's attempt 1 then applies again), keeps the third."""
    now = [1000.0]
    kit = database.kit("retained", retention=timedelta(hours=1), clock=lambda: now[0])
    assert kit.declaration()["key_retention_seconds"] == 3600.0
    assert isinstance(
        kit.apply("old", attempt=1, operation="op", payload=None, do=write()), Applied
    )
    assert kit.lookup("fenced", 1) == LookupAnswer.not_applied()
    assert kit.fences() == [("fenced", 1)]
    now[0] = 5000.0
    assert isinstance(
        kit.apply("new", attempt=1, operation="op", payload=None, do=write()), Applied
    )
    assert kit.purge() == 2
    assert kit.fences() == []
    assert kit.lookup("new", 1).verdict.value == "applied"
    late = kit.apply("fenced", attempt=1, operation="op", payload=None, do=write())
    assert isinstance(late, Applied)


def test_a_purge_past_the_window_makes_the_kit_answer_unknown_for_the_forgotten_key(
    database: Database,
) -> None:
    """Goal: a key the kit purged is never answered "not applied": the kit says it cannot tell,
    with why, and fences nothing; a key first sent after the purge's cutoff still is.

    Method: a kit on a clock we set (1 h window, 5 s skew): a key first sent and applied at
    t=1000, purged at t=5000 (cutoff 1400, the new watermark). Its lookup, with its sent time
    or with none, answers unknown naming the watermark and fences nothing; a key first sent at
    t=4000 answers not applied and is fenced; one sent at t=1402 (within the skew) is unknown.
    """
    now = [1000.0]
    kit = database.kit(
        "purged",
        retention=timedelta(hours=1),
        clock=lambda: now[0],
        clock_skew=timedelta(seconds=5),
    )
    assert kit.vouches_since() == 1000.0
    applied = kit.apply("charged", attempt=1, operation="op", payload=None, do=write())
    assert isinstance(applied, Applied)
    now[0] = 5000.0
    assert kit.purge() == 1
    assert kit.vouches_since() == 1400.0
    for sent_at in (1000.0, None):
        answer = kit.lookup("charged", 1, sent_at=sent_at)
        assert answer.verdict is LookupVerdict.UNKNOWN
        assert "since 1400.000" in (answer.reason or "")
    assert kit.fences() == []
    assert kit.lookup("near-the-cutoff", 1, sent_at=1402.0).verdict is LookupVerdict.UNKNOWN
    assert kit.lookup("after", 2, sent_at=4000.0) == LookupAnswer.not_applied()
    assert kit.fences() == [("after", 2)]
    # The kit's answer to a forgotten key fenced nothing: a late original is not refused.
    assert database.rows("SELECT count(*) FROM business WHERE key = 'charged'") == [(1,)]


def test_a_fresh_kit_table_cannot_vouch_for_a_key_sent_before_it(database: Database) -> None:
    """Goal: a kit whose table was lost and made again (a store recreated, or restored without
    it) knows its record begins now: a key first sent before is unknown, never "not applied";
    and ``restored()`` raises the watermark for a restore the table cannot see.

    Method: apply a key at t=1000, drop the kit's table, open the kit again at t=2000: the
    key's lookup with its sent time (1000) is unknown, fencing nothing; a key first sent at
    t=2010 is not applied. Then ``restored()`` at t=3000: that key's next lookup at a higher
    attempt still answers from its fence, a new key first sent at t=2500 is unknown."""
    now = [1000.0]
    options = {"clock": lambda: now[0], "clock_skew": timedelta(seconds=5)}
    first = database.kit("recreated", **options)
    assert isinstance(
        first.apply("k", attempt=1, operation="op", payload=None, do=write()), Applied
    )
    first.close()
    with database.connection() as db:
        db.execute("DROP TABLE ledgerflow_kit_keys")
    now[0] = 2000.0
    kit = database.kit("recreated", **options)
    answer = kit.lookup("k", 1, sent_at=1000.0)
    assert answer.verdict is LookupVerdict.UNKNOWN
    assert "first sent at 1000.000" in (answer.reason or "")
    assert kit.fences() == []
    assert kit.lookup("later", 1, sent_at=2010.0) == LookupAnswer.not_applied()
    now[0] = 3000.0
    kit.restored()
    assert kit.vouches_since() == 3000.0
    assert kit.lookup("later", 2, sent_at=2010.0) == LookupAnswer.not_applied()
    assert kit.lookup("between", 1, sent_at=2500.0).verdict is LookupVerdict.UNKNOWN
    assert kit.lookup("between", 1).verdict is LookupVerdict.UNKNOWN
    with pytest.raises(ValueError, match="non-empty"):
        kit.lookup("", 1)


def test_precondition_reads_the_original(database: Database) -> None:
    """Goal: a compensation's precondition is violated before its original applied, holds
    after, and is satisfied with the service's evidence when someone else undid it.

    Method: ask before and after applying the original; then with a ``reversed_by`` that finds
    evidence in the original's receipt."""
    kit = database.kit("pre")
    assert kit.precondition("compensate:p-1", original="p-1") == Precondition.violated(
        "nothing to undo: p-1 was never applied"
    )
    kit.apply("p-1", attempt=1, operation="op", payload=None, do=write())
    assert kit.precondition("compensate:p-1", original="p-1") == Precondition.holds()
    found = kit.precondition(
        "compensate:p-1", original="p-1", reversed_by=lambda db, receipt: {"by": receipt["key"]}
    )
    assert found == Precondition.satisfied({"by": "p-1"})


@pytest.mark.postgres
def test_a_lookup_during_an_application_waits_for_its_commit(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Goal: a lookup racing an application of the same key never answers "not applied" for
    a key that then applies.

    Method: on PostgreSQL, a lookup fences attempt 1 of a key (so its row exists: a fresh
    key would be serialised by its insert alone); attempt 2's business write then blocks
    inside its transaction while a second thread looks the key up at attempt 2; once the
    server shows the lookup waiting on a lock, the write goes on and commits: the lookup
    answers applied, with that receipt."""
    database = make_database("postgres", request.node.nodeid, tmp_path)
    request.addfinalizer(database.close)
    kit = database.kit("race")
    assert kit.lookup("race-1", 1) == LookupAnswer.not_applied()
    inside, go = threading.Event(), threading.Event()
    outcomes: dict[str, Any] = {}

    def slow(db: Any, request: KitRequest) -> Any:
        inside.set()
        assert go.wait(WAIT_SECONDS)
        return write()(db, request)

    applying = threading.Thread(
        target=lambda: outcomes.update(
            applied=kit.apply("race-1", attempt=2, operation="op", payload=None, do=slow)
        )
    )
    applying.start()
    assert inside.wait(WAIT_SECONDS)
    looking = threading.Thread(target=lambda: outcomes.update(lookup=kit.lookup("race-1", 2)))
    looking.start()
    _wait_for_a_lock_wait(database)
    go.set()
    applying.join(WAIT_SECONDS)
    looking.join(WAIT_SECONDS)
    assert isinstance(outcomes["applied"], Applied)
    assert outcomes["lookup"] == LookupAnswer.applied(outcomes["applied"].receipt)


def _wait_for_a_lock_wait(database: Database) -> None:
    with database.connection() as db:
        for _ in range(3000):
            waiting = db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                return
            db.execute("SELECT pg_sleep(0.01)")
    pytest.fail("the lookup never waited for the application's lock")


def test_handle_message_replies_with_the_correlation(database: Database) -> None:
    """Goal: the broker adapter's reply carries the message's correlation and the kit's
    answer; a redelivery gets the same receipt, a malformed message no reply.

    Method: handle one message twice (applied, then duplicate with the same receipt), one for
    an unknown operation (rejected), and messages without effect id or generation (ValueError)."""
    kit = database.kit("broker")
    message = {
        "effect_id": "e-1",
        "attempt": 1,
        "generation": 3,
        "key": "b-1",
        "operation": "op",
        "payload": {"n": 1},
    }
    operations = {"op": write()}
    first = asyncio.run(handle_message(kit, message, operations=operations))
    again = asyncio.run(handle_message(kit, message, operations=operations))
    correlation = {"effect_id": "e-1", "attempt": 1, "generation": 3, "key": "b-1"}
    receipt = {"key": "b-1", "attempt": 1, "kind": "effect"}
    # ``applied`` and ``evidence`` are what the relay reads; ``receipt`` is the same receipt.
    assert first == {
        **correlation,
        "applied": True,
        "evidence": receipt,
        "status": "applied",
        "receipt": receipt,
        "duplicate": False,
    }
    assert again == {**first, "duplicate": True}
    unknown = asyncio.run(
        handle_message(kit, {**message, "operation": "nope"}, operations=operations)
    )
    assert (unknown["status"], unknown["error_code"], unknown["retryable"]) == (
        "rejected",
        "unknown_operation",
        False,
    )
    assert unknown["applied"] is False
    assert unknown["reason"].startswith("unknown_operation: ")
    for broken in ({**message, "effect_id": None}, {**message, "generation": "3"}):
        with pytest.raises(ValueError, match=r"effect_id|generation"):
            asyncio.run(handle_message(kit, broken, operations=operations))


@given(key=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1))
def test_idempotency_key_header_round_trips(key: str) -> None:
    """Goal: any printable-ASCII key survives the header (quotes and backslashes included).

    Method: encode as the engine does, decode as the kit does: the same key."""
    [value] = idempotency_key_header(key).values()
    assert read_idempotency_key_header(value) == key


def test_idempotency_key_header_is_left_out_when_it_cannot_carry_the_key() -> None:
    """Goal: a key a header cannot carry is not mangled into one; a malformed header is refused.

    Method: a non-ASCII key gets no header; unclosed quotes and bad escapes raise ValueError;
    a bare (unquoted) key is read as it is."""
    assert idempotency_key_header("café-1") == {}
    for bad in ('"open', '"a\\b"', '"a"b'):
        with pytest.raises(ValueError, match="Idempotency-Key"):
            read_idempotency_key_header(bad)
    assert read_idempotency_key_header("bare-1") == "bare-1"
