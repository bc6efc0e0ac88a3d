"""A participant's reservation book: reserve, confirm, release, expire as conditional updates.

This module owns what a stock, seat or credit service keeps so that a saga can hold capacity
before it commits to it: one row per reservation in the participant's *own* SQLite file (not
Ledgerflow's journal), and an append-only record of every transition. It is a sample of a
participant, not part of Ledgerflow's participant package: the saga tests and demos build their
participants on it; it is not part of the public API.

The promise it exists for is docs/design.md's "an expiry and a confirmation cannot both win". Every
transition is one conditional ``UPDATE`` on the reservation's current state *and* version, under
``BEGIN IMMEDIATE``::

              confirm (expires_at >  now)
            +--------------------------------> CONFIRMED
            |
    HELD ---+-- release (the compensation) --> RELEASED
            |
            +--------------------------------> EXPIRED
              expire  (expires_at <= now)

Each arrow adds one to ``version``. Zero rows changed means the caller lost: the outcome says so
with the reservation as it now is, and nothing is retried under another identity. The two time
conditions are complements, so at any instant at most one of confirm and expire is eligible, and
the state condition makes the first committed transition out of HELD the only one. A trigger in
the schema refuses any other kind of update, so even a hand-written ``UPDATE`` cannot resurrect a
finished reservation or skip a version.

Several processes may share one file: writes take the write lock first (``BEGIN IMMEDIATE``) and
read the clock only after holding it, so the time a transition is judged at is the time it
commits, not the time the caller started waiting.

Example::

    with ReservationBook(Path("seats.db"), actor="seat-service") as book:
        book.define_resource("flight-42", capacity=180)
        held = book.reserve("booking-7/seat", "flight-42", quantity=2, ttl_seconds=900)
        outcome = book.confirm("booking-7/seat", held.version)
        assert outcome.result is Result.WON
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ledgerflow.demo.own_file import write_transaction

# How long a writer waits for another process's write lock before giving up with an error.
BUSY_TIMEOUT_SECONDS = 10.0
# expire_due never changes more than this many reservations in one transaction.
EXPIRE_BATCH_MAX = 500
_SCHEMA_VERSION = 1


class ReservationState(StrEnum):
    HELD = "HELD"
    CONFIRMED = "CONFIRMED"
    RELEASED = "RELEASED"
    EXPIRED = "EXPIRED"


class Result(StrEnum):
    """How a transition request ended for the caller."""

    WON = "won"  # this call made the transition
    LOST = "lost"  # zero rows changed: the reservation is not HELD at that version, or not eligible
    ALREADY = "already"  # the transition asked for had already happened; nothing changed


@dataclass(frozen=True, slots=True)
class Reservation:
    reservation_id: str
    resource: str
    quantity: int
    state: ReservationState
    version: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of a transition request and the reservation as it is after it."""

    result: Result
    reservation: Reservation
    reason: str

    @property
    def won(self) -> bool:
        return self.result is Result.WON


@dataclass(frozen=True, slots=True)
class Transition:
    """One row of the append-only history; ``from_state`` is None for the creating reserve."""

    seq: int
    reservation_id: str
    from_state: ReservationState | None
    to_state: ReservationState
    version: int
    at: float
    actor: str


class ReservationError(Exception):
    """A reservation request that cannot be honoured as asked."""


class UnknownResourceError(ReservationError):
    def __init__(self, resource: str) -> None:
        self.resource = resource
        super().__init__(f"no resource {resource!r}: define it with a capacity first")


class UnknownReservationError(ReservationError):
    def __init__(self, reservation_id: str) -> None:
        self.reservation_id = reservation_id
        super().__init__(f"no reservation {reservation_id!r}")


class InsufficientCapacityError(ReservationError):
    def __init__(self, resource: str, *, requested: int, available: int) -> None:
        self.resource, self.requested, self.available = resource, requested, available
        super().__init__(f"resource {resource!r} has {available} available, {requested} requested")


class ReservationConflictError(ReservationError):
    """The reservation id is taken by a reservation of something else."""

    def __init__(self, existing: Reservation, *, resource: str, quantity: int) -> None:
        self.existing = existing
        super().__init__(
            f"reservation {existing.reservation_id!r} already holds {existing.quantity} of "
            f"{existing.resource!r}; the same id cannot reserve {quantity} of {resource!r}"
        )


class CapacityInUseError(ReservationError):
    def __init__(self, resource: str, *, capacity: int, in_use: int) -> None:
        self.resource, self.capacity, self.in_use = resource, capacity, in_use
        super().__init__(
            f"resource {resource!r} cannot shrink to {capacity}: {in_use} is held or confirmed"
        )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS resources (
    resource TEXT PRIMARY KEY,
    capacity INTEGER NOT NULL CHECK (capacity >= 0));
CREATE TABLE IF NOT EXISTS reservations (
    reservation_id TEXT PRIMARY KEY,
    resource TEXT NOT NULL REFERENCES resources (resource),
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    state TEXT NOT NULL CHECK (state IN ('HELD', 'CONFIRMED', 'RELEASED', 'EXPIRED')),
    version INTEGER NOT NULL CHECK (version >= 1),
    expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS reservations_by_resource ON reservations (resource, state);
CREATE INDEX IF NOT EXISTS reservations_due ON reservations (state, expires_at);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    reservation_id TEXT NOT NULL REFERENCES reservations (reservation_id),
    from_state TEXT,
    to_state TEXT NOT NULL,
    version INTEGER NOT NULL,
    at REAL NOT NULL,
    actor TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS transitions_by_reservation ON transitions (reservation_id, seq);
-- The state machine, again, where no caller can bypass it: only HELD moves, only to a final
-- state, exactly one version up, and what was reserved never changes.
CREATE TRIGGER IF NOT EXISTS reservations_transition_only BEFORE UPDATE ON reservations
WHEN OLD.state <> 'HELD'
  OR NEW.state NOT IN ('CONFIRMED', 'RELEASED', 'EXPIRED')
  OR NEW.version <> OLD.version + 1
  OR NEW.reservation_id <> OLD.reservation_id
  OR NEW.resource <> OLD.resource
  OR NEW.quantity <> OLD.quantity
  OR NEW.expires_at <> OLD.expires_at
BEGIN SELECT RAISE(ABORT, 'illegal reservation transition'); END;
CREATE TRIGGER IF NOT EXISTS reservations_kept BEFORE DELETE ON reservations
BEGIN SELECT RAISE(ABORT, 'reservations are never deleted'); END;
CREATE TRIGGER IF NOT EXISTS transitions_no_update BEFORE UPDATE ON transitions
BEGIN SELECT RAISE(ABORT, 'transitions are append-only'); END;
CREATE TRIGGER IF NOT EXISTS transitions_no_delete BEFORE DELETE ON transitions
BEGIN SELECT RAISE(ABORT, 'transitions are append-only'); END;
"""

# The conditional transitions. Zero rows changed is the only signal of losing; the statements
# are fixed text so that the guard cannot be left out by a caller.
_CONFIRM = (
    "UPDATE reservations SET state = 'CONFIRMED', version = version + 1 "
    "WHERE reservation_id = :id AND state = 'HELD' AND version = :version "
    "AND expires_at > :now"
)
_EXPIRE = (
    "UPDATE reservations SET state = 'EXPIRED', version = version + 1 "
    "WHERE reservation_id = :id AND state = 'HELD' AND version = :version "
    "AND expires_at <= :now"
)
_RELEASE = (
    "UPDATE reservations SET state = 'RELEASED', version = version + 1 "
    "WHERE reservation_id = :id AND state = 'HELD' AND version = :version"
)
_IN_USE = (
    "SELECT COALESCE(SUM(quantity), 0) FROM reservations "
    "WHERE resource = :resource AND state IN ('HELD', 'CONFIRMED')"
)
# One statement, so capacity and use are read from the same snapshot without a write lock.
_AVAILABLE = f"SELECT capacity - ({_IN_USE}) FROM resources WHERE resource = :resource"


def _reservation(row: sqlite3.Row) -> Reservation:
    reservation = Reservation(
        reservation_id=row["reservation_id"],
        resource=row["resource"],
        quantity=row["quantity"],
        state=ReservationState(row["state"]),
        version=row["version"],
        expires_at=row["expires_at"],
    )
    # Only HELD is ever created and each transition adds one, so HELD is version 1 and the
    # final states version 2; anything else means the file was written by something else.
    expected = 1 if reservation.state is ReservationState.HELD else 2
    if reservation.version != expected:
        raise RuntimeError(f"reservation {reservation.reservation_id!r} is corrupt: {row}")
    return reservation


class ReservationBook:
    """One participant's reservations in its own SQLite file; safe across processes.

    Use one book per thread or process (a lock makes sharing one safe but serial). ``actor`` is
    written into the history beside every transition this book makes.
    """

    def __init__(self, path: Path, *, actor: str | None = None) -> None:
        self.path = path
        self.actor = actor or f"pid {os.getpid()}"
        self._lock = threading.Lock()
        # isolation_level=None: transactions are begun explicitly, so each is exactly one op.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        try:
            # First, so that even switching to WAL waits for a process creating the file.
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._create_schema()
        except BaseException:
            self._db.close()
            raise

    def _create_schema(self) -> None:
        with self._transaction() as db:
            found = db.execute("PRAGMA user_version").fetchone()[0]
            if found not in (0, _SCHEMA_VERSION):
                raise RuntimeError(f"{self.path} has reservation schema {found}, not 1")
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ReservationBook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db, self._lock)

    def _read(self, db: sqlite3.Connection, reservation_id: str) -> Reservation | None:
        row = db.execute(
            "SELECT * FROM reservations WHERE reservation_id = ?", (reservation_id,)
        ).fetchone()
        return None if row is None else _reservation(row)

    def _record(
        self,
        db: sqlite3.Connection,
        reservation: Reservation,
        from_state: ReservationState | None,
        at: float,
    ) -> None:
        db.execute(
            "INSERT INTO transitions (reservation_id, from_state, to_state, version, at, actor) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                reservation.reservation_id,
                from_state,
                reservation.state,
                reservation.version,
                at,
                self.actor,
            ),
        )

    def define_resource(self, resource: str, *, capacity: int) -> None:
        """Create ``resource`` or change its capacity; never below what is held or confirmed."""
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        with self._transaction() as db:
            in_use: int = db.execute(_IN_USE, {"resource": resource}).fetchone()[0]
            if capacity < in_use:
                raise CapacityInUseError(resource, capacity=capacity, in_use=in_use)
            db.execute(
                "INSERT INTO resources (resource, capacity) VALUES (?, ?) "
                "ON CONFLICT (resource) DO UPDATE SET capacity = excluded.capacity",
                (resource, capacity),
            )

    def available(self, resource: str) -> int:
        """Capacity minus the quantity of HELD and CONFIRMED reservations.

        A HELD reservation past its expiry still counts until :meth:`expire_due` (or
        :meth:`expire`) records it as EXPIRED: capacity comes back through a transition on the
        record, never by a read quietly reinterpreting a row.
        """
        with self._lock:
            return self._available(self._db, resource)

    def _available(self, db: sqlite3.Connection, resource: str) -> int:
        row = db.execute(_AVAILABLE, {"resource": resource}).fetchone()
        if row is None:
            raise UnknownResourceError(resource)
        available: int = row[0]
        return available

    def reserve(
        self,
        reservation_id: str,
        resource: str,
        quantity: int,
        ttl_seconds: float,
        now: float | None = None,
    ) -> Reservation:
        """Hold ``quantity`` of ``resource`` until ``now + ttl_seconds``, as version 1.

        Idempotent by ``reservation_id``: asking again returns the existing reservation as it is
        (whatever its state, whatever the ttl asked for now). Raises
        :class:`ReservationConflictError` if the id holds something else,
        :class:`InsufficientCapacityError` if the resource cannot cover the quantity.
        """
        if quantity <= 0:
            raise ValueError(f"quantity must be > 0, got {quantity}")
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be > 0, got {ttl_seconds}")
        with self._transaction() as db:
            existing = self._read(db, reservation_id)
            if existing is not None:
                if (existing.resource, existing.quantity) != (resource, quantity):
                    raise ReservationConflictError(existing, resource=resource, quantity=quantity)
                return existing
            available = self._available(db, resource)
            if quantity > available:
                raise InsufficientCapacityError(resource, requested=quantity, available=available)
            at = time.time() if now is None else now
            reservation = Reservation(
                reservation_id=reservation_id,
                resource=resource,
                quantity=quantity,
                state=ReservationState.HELD,
                version=1,
                expires_at=at + ttl_seconds,
            )
            db.execute(
                "INSERT INTO reservations "
                "(reservation_id, resource, quantity, state, version, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (reservation_id, resource, quantity, reservation.state, 1, reservation.expires_at),
            )
            self._record(db, reservation, None, at)
            return reservation

    def _attempt(
        self,
        db: sqlite3.Connection,
        statement: str,
        reservation_id: str,
        version: int,
        now: float | None,
    ) -> tuple[bool, Reservation, float]:
        """Run one conditional transition; say whether it changed a row, and the row after it."""
        before = self._read(db, reservation_id)
        if before is None:
            raise UnknownReservationError(reservation_id)
        # Read the clock only now, holding the write lock: the judged time is the commit time.
        at = time.time() if now is None else now
        changed = db.execute(statement, {"id": reservation_id, "version": version, "now": at})
        after = self._read(db, reservation_id)
        if after is None:  # the schema refuses deletes; this would be a foreign hand
            raise UnknownReservationError(reservation_id)
        if changed.rowcount == 1:
            self._record(db, after, before.state, at)
        return changed.rowcount == 1, after, at

    def confirm(self, reservation_id: str, version: int, now: float | None = None) -> Outcome:
        """HELD -> CONFIRMED, only at ``version`` and only while ``expires_at > now``.

        ALREADY if it is CONFIRMED one version later (this confirmation, or an identical one,
        already committed); LOST in every other case, including a HELD reservation past expiry.
        """
        return self._once(_CONFIRM, ReservationState.CONFIRMED, reservation_id, version, now)

    def release(self, reservation_id: str, version: int, now: float | None = None) -> Outcome:
        """HELD -> RELEASED at ``version``: the compensation of :meth:`reserve`.

        ALREADY if it is RELEASED or EXPIRED (the hold is gone either way, so the compensation's
        goal holds); LOST if it is CONFIRMED (a confirmed reservation is not released behind
        the confirmer's back) or HELD at another version. Expiry is not checked: giving back an
        overdue hold early is always right.
        """
        with self._transaction() as db:
            won, after, at = self._attempt(db, _RELEASE, reservation_id, version, now)
        if won:
            return Outcome(Result.WON, after, "released")
        if after.state in (ReservationState.RELEASED, ReservationState.EXPIRED):
            return Outcome(Result.ALREADY, after, f"already {after.state.value}")
        return Outcome(Result.LOST, after, _why_lost(after, version, at, _RELEASE))

    def expire(self, reservation_id: str, version: int, now: float | None = None) -> Outcome:
        """HELD -> EXPIRED at ``version``, only once ``expires_at <= now``.

        ALREADY if it is EXPIRED one version later; LOST otherwise, including "not due yet".
        """
        return self._once(_EXPIRE, ReservationState.EXPIRED, reservation_id, version, now)

    def _once(
        self,
        statement: str,
        to: ReservationState,
        reservation_id: str,
        version: int,
        now: float | None,
    ) -> Outcome:
        """A transition to ``to`` at ``version``: WON if this call made it, ALREADY if it is
        ``to`` one version later (it, or an identical one, committed already), else LOST."""
        with self._transaction() as db:
            won, after, at = self._attempt(db, statement, reservation_id, version, now)
        done = to.value.lower()
        if won:
            return Outcome(Result.WON, after, done)
        if after.state is to and after.version == version + 1:
            return Outcome(Result.ALREADY, after, f"already {done} from this version")
        return Outcome(Result.LOST, after, _why_lost(after, version, at, statement))

    def expire_due(self, now: float | None = None, *, limit: int = EXPIRE_BATCH_MAX) -> list[str]:
        """Expire every HELD reservation whose expiry has passed (at most ``limit``, oldest first).

        Each goes through the same conditional update as :meth:`expire`, in one transaction;
        returns the ids this call expired.
        """
        expired: list[str] = []
        with self._transaction() as db:
            at = time.time() if now is None else now
            due = db.execute(
                "SELECT reservation_id, version FROM reservations "
                "WHERE state = 'HELD' AND expires_at <= ? ORDER BY expires_at LIMIT ?",
                (at, limit),
            ).fetchall()
            for row in due:
                won, _, _ = self._attempt(db, _EXPIRE, row["reservation_id"], row["version"], at)
                if won:
                    expired.append(row["reservation_id"])
        return expired

    def get(self, reservation_id: str) -> Reservation | None:
        with self._lock:
            return self._read(self._db, reservation_id)

    def history(self, reservation_id: str) -> list[Transition]:
        """Every transition of the reservation, oldest first, starting with its creation."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM transitions WHERE reservation_id = ? ORDER BY seq",
                (reservation_id,),
            ).fetchall()
        return [
            Transition(
                seq=row["seq"],
                reservation_id=row["reservation_id"],
                from_state=None
                if row["from_state"] is None
                else ReservationState(row["from_state"]),
                to_state=ReservationState(row["to_state"]),
                version=row["version"],
                at=row["at"],
                actor=row["actor"],
            )
            for row in rows
        ]


def _why_lost(after: Reservation, version: int, at: float, statement: str) -> str:
    """Which condition of the conditional update was false (the reservation is as after it)."""
    if after.state is not ReservationState.HELD:
        return f"reservation is {after.state.value} at version {after.version}, not HELD"
    if after.version != version:
        return f"reservation is at version {after.version}, not {version}"
    if statement is _CONFIRM:
        return f"reservation expired at {after.expires_at!r} (now {at!r})"
    return f"reservation is not due until {after.expires_at!r} (now {at!r})"
