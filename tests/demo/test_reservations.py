"""The participant's reservation book: every transition allowed or refused, and the expiry race.

Most tests inject ``now`` so that expiry is exact, not a matter of timing. The race test runs
two real OS processes (``reservation_race.py``), one confirming and one expiring the same
reservation, released together by a barrier file each round, and checks that every round has
exactly one winner. The deterministic tests replay both orders of that race on two connections.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from ledgerflow.demo.reservations import (
    CapacityInUseError,
    InsufficientCapacityError,
    Reservation,
    ReservationBook,
    ReservationConflictError,
    ReservationState,
    Result,
    UnknownReservationError,
    UnknownResourceError,
)

NOW = 1_000_000.0
TTL = 60.0
EXPIRES_AT = NOW + TTL
HELD, CONFIRMED = ReservationState.HELD, ReservationState.CONFIRMED
RELEASED, EXPIRED = ReservationState.RELEASED, ReservationState.EXPIRED

WORKER = Path(__file__).with_name("reservation_race.py")
RACE_ROUNDS = 200
# Expiries from 0.1 ms to ~4.4 ms after the barrier opens, cycled over the rounds: the race is
# close somewhere in that range on any machine, so both outcomes occur without tuning.
RACE_TTLS = tuple(0.0001 * 1.25**k for k in range(18))
WAIT_SECONDS = 30.0
POLL_SECONDS = 0.0001


@pytest.fixture
def book(tmp_path: Path) -> Iterator[ReservationBook]:
    with ReservationBook(tmp_path / "seats.db", actor="test") as opened:
        opened.define_resource("seats", capacity=10)
        yield opened


def _hold(book: ReservationBook, reservation_id: str = "r1", quantity: int = 1) -> Reservation:
    return book.reserve(reservation_id, "seats", quantity, ttl_seconds=TTL, now=NOW)


def _moves(book: ReservationBook, reservation_id: str) -> list[tuple[Any, ...]]:
    return [(t.from_state, t.to_state, t.version) for t in book.history(reservation_id)]


def test_reserve_holds_at_version_one(book: ReservationBook) -> None:
    """Goal: a reservation starts HELD at version 1 with its expiry, and takes capacity.

    Method: reserve 3 of 10; read it back, its history and the availability.
    """
    held = _hold(book, quantity=3)
    assert held == Reservation("r1", "seats", 3, HELD, 1, EXPIRES_AT)
    assert book.get("r1") == held
    assert book.available("seats") == 7
    [created] = book.history("r1")
    assert (created.from_state, created.to_state, created.version) == (None, HELD, 1)
    assert (created.at, created.actor) == (NOW, "test")


def test_reserve_is_idempotent_by_id(book: ReservationBook) -> None:
    """Goal: the same reservation id again returns the existing reservation unchanged.

    Method: reserve twice (the second time later and with another ttl), then once more after it
    was confirmed; nothing is added to the history and no capacity is taken twice.
    """
    held = _hold(book, quantity=2)
    assert book.reserve("r1", "seats", 2, ttl_seconds=5, now=NOW + 30) == held
    assert book.available("seats") == 8
    book.confirm("r1", held.version, now=NOW)
    again = book.reserve("r1", "seats", 2, ttl_seconds=TTL, now=NOW + 1)
    assert (again.state, again.version) == (CONFIRMED, 2)
    assert _moves(book, "r1") == [(None, HELD, 1), (HELD, CONFIRMED, 2)]


def test_reserve_refuses_an_id_reused_for_something_else(book: ReservationBook) -> None:
    """Goal: an idempotency key names one request; reusing it for another is an error.

    Method: reserve, then the same id with another quantity and with another resource.
    """
    book.define_resource("meals", capacity=10)
    _hold(book, quantity=2)
    with pytest.raises(ReservationConflictError, match=r"already holds 2 of 'seats'"):
        book.reserve("r1", "seats", 3, ttl_seconds=TTL, now=NOW)
    with pytest.raises(ReservationConflictError, match=r"cannot reserve 2 of 'meals'"):
        book.reserve("r1", "meals", 2, ttl_seconds=TTL, now=NOW)
    assert book.available("seats") == 8
    assert book.available("meals") == 10


def test_reserve_refuses_beyond_capacity(book: ReservationBook) -> None:
    """Goal: available = capacity - HELD - CONFIRMED, and a reservation cannot exceed it.

    Method: fill the resource with a HELD and a CONFIRMED reservation, ask for one more, then
    free capacity by a release and by an expiry and reserve again.
    """
    first = _hold(book, "a", quantity=6)
    book.confirm("a", first.version, now=NOW)
    _hold(book, "b", quantity=4)
    with pytest.raises(InsufficientCapacityError, match="0 available, 1 requested") as refused:
        _hold(book, "c", quantity=1)
    assert (refused.value.available, refused.value.requested) == (0, 1)
    assert book.get("c") is None
    book.release("b", 1, now=NOW)
    assert book.available("seats") == 4
    _hold(book, "d", quantity=4)
    assert book.expire_due(now=EXPIRES_AT) == ["d"]
    assert book.available("seats") == 4


def test_unknown_resource_and_bad_arguments_are_refused(book: ReservationBook) -> None:
    """Goal: nothing is reserved against a resource without a capacity, or with nonsense sizes.

    Method: reserve an undefined resource, a zero quantity, a zero ttl; define a negative
    capacity; read the availability of an undefined resource.
    """
    with pytest.raises(UnknownResourceError, match="'rockets'"):
        book.reserve("r1", "rockets", 1, ttl_seconds=TTL, now=NOW)
    with pytest.raises(UnknownResourceError):
        book.available("rockets")
    with pytest.raises(ValueError, match="quantity"):
        book.reserve("r1", "seats", 0, ttl_seconds=TTL, now=NOW)
    with pytest.raises(ValueError, match="ttl_seconds"):
        book.reserve("r1", "seats", 1, ttl_seconds=0, now=NOW)
    with pytest.raises(ValueError, match="capacity"):
        book.define_resource("seats", capacity=-1)
    assert book.get("r1") is None


def test_capacity_cannot_shrink_below_what_is_in_use(book: ReservationBook) -> None:
    """Goal: changing a capacity never strands a held or confirmed reservation.

    Method: hold 4, shrink to 3 (refused) and to 4 (allowed), then grow.
    """
    _hold(book, quantity=4)
    with pytest.raises(CapacityInUseError, match="cannot shrink to 3: 4"):
        book.define_resource("seats", capacity=3)
    book.define_resource("seats", capacity=4)
    assert book.available("seats") == 0
    book.define_resource("seats", capacity=20)
    assert book.available("seats") == 16


def test_confirm_wins_before_expiry_and_is_idempotent(book: ReservationBook) -> None:
    """Goal: HELD -> CONFIRMED at the held version before expiry; asking again is ALREADY.

    Method: confirm just before the expiry, then confirm again from the same version.
    """
    held = _hold(book)
    won = book.confirm("r1", held.version, now=EXPIRES_AT - 0.001)
    assert (won.result, won.reservation.state, won.reservation.version) == (
        Result.WON,
        CONFIRMED,
        2,
    )
    assert won.won
    again = book.confirm("r1", held.version, now=EXPIRES_AT + 100)
    assert (again.result, again.reservation) == (Result.ALREADY, won.reservation)
    assert _moves(book, "r1") == [(None, HELD, 1), (HELD, CONFIRMED, 2)]


@pytest.mark.parametrize("now", [EXPIRES_AT, EXPIRES_AT + 1], ids=["at-expiry", "after-expiry"])
def test_confirm_at_or_after_expiry_loses(book: ReservationBook, now: float) -> None:
    """Goal: a confirmation is valid only while expires_at > now; the boundary belongs to expiry.

    Method: confirm exactly at and after the expiry; the reservation stays HELD at version 1
    with no new history, and expire then wins at the same instant.
    """
    held = _hold(book)
    lost = book.confirm("r1", held.version, now=now)
    assert (lost.result, lost.reservation) == (Result.LOST, held)
    assert "expired" in lost.reason
    assert _moves(book, "r1") == [(None, HELD, 1)]
    assert book.expire("r1", held.version, now=now).result is Result.WON


def test_a_stale_version_loses_every_transition(book: ReservationBook) -> None:
    """Goal: a transition names the version it was decided on; any other version loses.

    Method: confirm, release and expire a HELD reservation at version 7 (and at 0).
    """
    held = _hold(book)
    for version in (0, 7):
        outcomes = [
            book.confirm("r1", version, now=NOW),
            book.release("r1", version, now=NOW),
            book.expire("r1", version, now=EXPIRES_AT),
        ]
        assert [o.result for o in outcomes] == [Result.LOST] * 3
        assert all(f"not {version}" in o.reason for o in outcomes)
    assert book.get("r1") == held
    assert _moves(book, "r1") == [(None, HELD, 1)]


def test_release_is_the_compensation_of_reserve(book: ReservationBook) -> None:
    """Goal: HELD -> RELEASED gives the capacity back; releasing again is ALREADY, not an error.

    Method: release (even past its expiry, which must not matter), then release again from
    the same version and from a made-up one.
    """
    held = _hold(book, quantity=3)
    released = book.release("r1", held.version, now=EXPIRES_AT + 5)
    assert (released.result, released.reservation.state) == (Result.WON, RELEASED)
    assert book.available("seats") == 10
    for version in (held.version, 9):
        again = book.release("r1", version, now=NOW)
        assert (again.result, again.reservation) == (Result.ALREADY, released.reservation)
    assert _moves(book, "r1") == [(None, HELD, 1), (HELD, RELEASED, 2)]


def test_release_of_an_expired_reservation_is_already_done(book: ReservationBook) -> None:
    """Goal: a compensation finding the hold already expired has nothing left to do.

    Method: expire the reservation, then release it.
    """
    held = _hold(book)
    book.expire("r1", held.version, now=EXPIRES_AT)
    outcome = book.release("r1", held.version, now=EXPIRES_AT)
    assert (outcome.result, outcome.reservation.state) == (Result.ALREADY, EXPIRED)
    assert outcome.reason == "already EXPIRED"


def test_release_of_a_confirmed_reservation_is_refused(book: ReservationBook) -> None:
    """Goal: a compensation whose precondition no longer holds is not applied blindly.

    Method: confirm, then release from the held version: LOST, still CONFIRMED, still counted.
    """
    held = _hold(book, quantity=2)
    book.confirm("r1", held.version, now=NOW)
    refused = book.release("r1", held.version, now=NOW)
    assert (refused.result, refused.reservation.state) == (Result.LOST, CONFIRMED)
    assert "CONFIRMED at version 2, not HELD" in refused.reason
    assert book.available("seats") == 8


def test_expire_waits_for_the_expiry_and_is_idempotent(book: ReservationBook) -> None:
    """Goal: expire does nothing before the expiry, wins at it, and is ALREADY after it.

    Method: expire just before, exactly at, and again after the expiry.
    """
    held = _hold(book)
    early = book.expire("r1", held.version, now=EXPIRES_AT - 0.001)
    assert (early.result, early.reservation) == (Result.LOST, held)
    assert "not due" in early.reason
    won = book.expire("r1", held.version, now=EXPIRES_AT)
    assert (won.result, won.reservation.state, won.reservation.version) == (Result.WON, EXPIRED, 2)
    again = book.expire("r1", held.version, now=EXPIRES_AT + 1)
    assert (again.result, again.reservation) == (Result.ALREADY, won.reservation)
    assert _moves(book, "r1") == [(None, HELD, 1), (HELD, EXPIRED, 2)]


def test_finished_reservations_do_not_move(book: ReservationBook) -> None:
    """Goal: CONFIRMED, RELEASED and EXPIRED are final for every transition.

    Method: finish three reservations one way each, then try every other transition on each.
    """
    for reservation_id in ("c", "r", "e"):
        _hold(book, reservation_id)
    book.confirm("c", 1, now=NOW)
    book.release("r", 1, now=NOW)
    book.expire("e", 1, now=EXPIRES_AT)
    assert book.confirm("r", 1, now=NOW).result is Result.LOST
    assert book.confirm("e", 1, now=NOW).result is Result.LOST
    assert book.expire("c", 1, now=EXPIRES_AT).result is Result.LOST
    assert book.expire("r", 1, now=EXPIRES_AT).result is Result.LOST
    assert book.release("c", 1, now=NOW).result is Result.LOST
    finished = {rid: book.get(rid) for rid in ("c", "r", "e")}
    assert {rid: (r.state, r.version) for rid, r in finished.items() if r} == {
        "c": (CONFIRMED, 2),
        "r": (RELEASED, 2),
        "e": (EXPIRED, 2),
    }
    assert all(len(book.history(rid)) == 2 for rid in finished)


def test_expire_due_expires_only_held_reservations_past_expiry(book: ReservationBook) -> None:
    """Goal: the sweeper expires exactly the HELD reservations whose time has come.

    Method: one reservation due, one not yet due, one due but confirmed, one due but released;
    sweep twice; then check the batch limit.
    """
    book.reserve("due", "seats", 1, ttl_seconds=10, now=NOW)
    book.reserve("later", "seats", 1, ttl_seconds=100, now=NOW)
    book.reserve("confirmed", "seats", 1, ttl_seconds=10, now=NOW)
    book.reserve("released", "seats", 1, ttl_seconds=10, now=NOW)
    book.confirm("confirmed", 1, now=NOW)
    book.release("released", 1, now=NOW)
    assert book.expire_due(now=NOW + 9) == []
    assert book.expire_due(now=NOW + 10) == ["due"]
    assert book.expire_due(now=NOW + 10) == []
    assert _moves(book, "due") == [(None, HELD, 1), (HELD, EXPIRED, 2)]
    assert book.get("later") == Reservation("later", "seats", 1, HELD, 1, NOW + 100)
    book.reserve("soon", "seats", 1, ttl_seconds=50, now=NOW)
    assert book.expire_due(now=NOW + 1000, limit=1) == ["soon"]
    assert book.expire_due(now=NOW + 1000, limit=1) == ["later"]


def test_unknown_reservations(book: ReservationBook) -> None:
    """Goal: a transition on an id that was never reserved is an error, not a silent loss.

    Method: get, confirm, release and expire an unknown id.
    """
    assert book.get("nope") is None
    assert book.history("nope") == []
    for attempt in (book.confirm, book.release, book.expire):
        with pytest.raises(UnknownReservationError, match="'nope'"):
            attempt("nope", 1, NOW)


def test_the_schema_refuses_what_the_book_would_never_do(book: ReservationBook) -> None:
    """Goal: the state machine holds even against a hand-written UPDATE on the participant's file.

    Method: on a raw connection, try to resurrect a confirmed reservation, to skip a version,
    to change what was reserved, and to rewrite or delete history.
    """
    _hold(book, "done")
    book.confirm("done", 1, now=NOW)
    _hold(book, "held")
    raw = sqlite3.connect(book.path, isolation_level=None)
    try:
        for statement in (
            "UPDATE reservations SET state = 'HELD', version = 3 WHERE reservation_id = 'done'",
            "UPDATE reservations SET state = 'EXPIRED', version = 5 WHERE reservation_id = 'held'",
            "UPDATE reservations SET state = 'EXPIRED', version = 2, quantity = 9 "
            "WHERE reservation_id = 'held'",
            "UPDATE transitions SET actor = 'someone else'",
            "DELETE FROM transitions",
            "DELETE FROM reservations",
        ):
            with pytest.raises(sqlite3.IntegrityError):
                raw.execute(statement)
    finally:
        raw.close()
    assert book.get("held") == Reservation("held", "seats", 1, HELD, 1, EXPIRES_AT)
    assert len(book.history("done")) == 2


@pytest.mark.parametrize("first", ["confirm", "expire"])
def test_two_connections_in_either_order_have_one_winner(tmp_path: Path, first: str) -> None:
    """Goal: the race, replayed deterministically: both sides read version 1, one wins.

    Method: two books (two connections) on one file both read the HELD reservation; then the
    confirmer and the expirer act in the given order. The confirmer's clock says "before
    expiry" and the expirer's "after", so each would win alone: the second one loses with zero
    rows changed (no history row, version untouched by it) purely on the state/version guard.
    """
    path = tmp_path / "seats.db"
    with (
        ReservationBook(path, actor="confirmer") as confirmer,
        ReservationBook(path, actor="expirer") as expirer,
    ):
        confirmer.define_resource("seats", capacity=1)
        confirmer.reserve("r1", "seats", 1, ttl_seconds=TTL, now=NOW)
        seen_by_confirmer, seen_by_expirer = confirmer.get("r1"), expirer.get("r1")
        assert seen_by_confirmer == seen_by_expirer
        assert seen_by_confirmer is not None
        assert seen_by_expirer is not None
        assert seen_by_confirmer.version == 1

        def confirm() -> Any:
            return confirmer.confirm("r1", seen_by_confirmer.version, now=EXPIRES_AT - 0.001)

        def expire() -> Any:
            return expirer.expire("r1", seen_by_expirer.version, now=EXPIRES_AT)

        actions = {"confirm": confirm, "expire": expire}
        second = "expire" if first == "confirm" else "confirm"
        winner, loser = actions[first](), actions[second]()
        assert (winner.result, loser.result) == (Result.WON, Result.LOST)
        assert loser.reservation == winner.reservation
        assert "not HELD" in loser.reason
        final = {"confirm": CONFIRMED, "expire": EXPIRED}[first]
        assert [(t.from_state, t.to_state, t.version, t.actor) for t in expirer.history("r1")] == [
            (None, HELD, 1, "confirmer"),
            (HELD, final, 2, {"confirm": "confirmer", "expire": "expirer"}[first]),
        ]


def test_the_clock_is_read_after_the_write_lock(tmp_path: Path) -> None:
    """Goal: a confirmation is judged at the time it commits, not when it started waiting.

    Method: another connection holds the write lock; a thread calls confirm (real clock) before
    the expiry and blocks on the lock; once the expiry has passed (waited for on the clock,
    bounded) the lock is released and the confirmation must lose as expired.
    """
    path = tmp_path / "seats.db"
    with ReservationBook(path) as book, ReservationBook(path) as late:
        book.define_resource("seats", capacity=1)
        held = book.reserve("r1", "seats", 1, ttl_seconds=0.2)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        calling = threading.Event()
        outcomes: list[Any] = []

        def confirm() -> None:
            calling.set()
            outcomes.append(late.confirm("r1", held.version))

        thread = threading.Thread(target=confirm)
        thread.start()
        try:
            assert calling.wait(WAIT_SECONDS)
            assert time.time() < held.expires_at, "precondition: confirm was called in time"
            deadline = time.monotonic() + WAIT_SECONDS
            while time.time() <= held.expires_at and time.monotonic() < deadline:
                time.sleep(0.001)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
            thread.join(WAIT_SECONDS)
        [outcome] = outcomes
        assert (outcome.result, outcome.reservation.state) == (Result.LOST, HELD)
        assert "expired" in outcome.reason


def _start_worker(
    role: str, database: Path, barrier: Path, ids: list[str], logs: Path
) -> subprocess.Popen[bytes]:
    # Output goes to files: a pipe nobody reads until the end fills up and stalls the worker.
    with (logs / f"{role}.out").open("wb") as out, (logs / f"{role}.err").open("wb") as err:
        command = [sys.executable, str(WORKER), "--db", str(database), "--role", role]
        command += ["--barrier", str(barrier)]
        for reservation_id in ids:
            command += ["--id", reservation_id]
        return subprocess.Popen(command, stdout=out, stderr=err)


def _wait_ready(
    barrier: Path, reservation_id: str, workers: list[subprocess.Popen[bytes]], logs: Path
) -> None:
    ready = [barrier / f"{reservation_id}.{role}.ready" for role in ("confirm", "expire")]
    deadline = time.monotonic() + WAIT_SECONDS
    while not all(path.exists() for path in ready):
        if any(worker.poll() is not None for worker in workers) or time.monotonic() > deadline:
            errors = {p.name: p.read_text() for p in logs.glob("*.err")}
            pytest.fail(f"workers not ready for {reservation_id}: {errors}")
        time.sleep(POLL_SECONDS)


def _check_round(book: ReservationBook, reservation_id: str, sides: dict[str, Any]) -> str:
    """Assert one winner, its final state and one move out of HELD; say how the round went."""
    assert sorted(sides) == ["confirm", "expire"], (reservation_id, sides)
    winners = [role for role, line in sides.items() if line["result"] == "won"]
    assert len(winners) == 1, (reservation_id, sides)
    [winner] = winners
    loser = "expire" if winner == "confirm" else "confirm"
    assert sides[loser]["result"] == "lost", (reservation_id, sides)
    final = book.get(reservation_id)
    assert final is not None
    assert final.state == {"confirm": CONFIRMED, "expire": EXPIRED}[winner]
    assert final.version == 2
    moves = [t for t in book.history(reservation_id) if t.from_state is HELD]
    assert [(t.to_state, t.version, t.actor) for t in moves] == [(final.state, 2, winner)]
    # The loser either found the winner's transition committed (zero rows: not HELD), or was a
    # confirmation that came first but already too late (zero rows: expired, still HELD).
    seen = sides[loser]["reservation"]
    if seen == asdict(final):
        return f"{winner} won, {loser} found it done"
    assert loser == "confirm", (reservation_id, sides)
    assert (seen["state"], seen["version"]) == ("HELD", 1), (reservation_id, sides)
    assert "expired" in sides[loser]["reason"], (reservation_id, sides)
    return "expire won, confirm came first but too late"


@pytest.mark.slow
def test_confirm_racing_expiry_has_exactly_one_winner(tmp_path: Path) -> None:
    """Goal: a confirmation racing an expiry, in two real processes, has exactly one winner.

    Method: two worker processes (one confirms, one expires like a sweeper once the expiry has
    passed) serve RACE_ROUNDS rounds. Each round the test waits until both are ready, reserves
    with an expiry a fraction of a millisecond to a few milliseconds ahead, and opens the
    barrier. Afterwards every round must show exactly one winner, the final state of that
    winner, version 1 -> 2, and exactly one transition out of HELD, made by the winner. How
    often each side won is printed, not asserted (it depends on the machine).
    """
    database, barrier = tmp_path / "seats.db", tmp_path / "barrier"
    barrier.mkdir()
    ids = [f"race-{n}" for n in range(RACE_ROUNDS)]
    started = time.monotonic()
    with ReservationBook(database, actor="test") as book:
        book.define_resource("seats", capacity=RACE_ROUNDS)
        workers = [
            _start_worker(role, database, barrier, ids, tmp_path) for role in ("confirm", "expire")
        ]
        try:
            for n, reservation_id in enumerate(ids):
                _wait_ready(barrier, reservation_id, workers, tmp_path)
                book.reserve(reservation_id, "seats", 1, ttl_seconds=RACE_TTLS[n % len(RACE_TTLS)])
                (barrier / f"{reservation_id}.go").touch()
            codes = [worker.wait(WAIT_SECONDS) for worker in workers]
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(WAIT_SECONDS)
        errors = {p.name: p.read_text() for p in tmp_path.glob("*.err")}
        assert codes == [0, 0], errors
        sides: dict[str, dict[str, Any]] = {reservation_id: {} for reservation_id in ids}
        for role in ("confirm", "expire"):
            for line in (tmp_path / f"{role}.out").read_text().splitlines():
                answer = json.loads(line)
                sides[answer["id"]][role] = answer
        rounds = Counter(_check_round(book, rid, sides[rid]) for rid in ids)
    elapsed = time.monotonic() - started
    print(f"\nconfirm-vs-expire race: {RACE_ROUNDS} rounds in {elapsed:.2f}s")
    for how, count in sorted(rounds.items()):
        print(f"  {count:4d}  {how}")
    assert rounds.total() == RACE_ROUNDS
