"""One side of the confirm-versus-expire race, run as its own OS process by the race test.

Usage::

    python reservation_race.py --db PATH --role confirm|expire --barrier DIR --id ID [--id ID ...]

For each id in order the worker creates ``DIR/<id>.<role>.ready``, waits for ``DIR/<id>.go``,
reads the reservation as a caller would (the version it acts on is the one it saw), and then:

- ``confirm`` confirms it at once;
- ``expire`` behaves like a sweeper: it waits until the reservation's expiry has passed, then
  expires it (before the expiry there is nothing to race for: expire would simply not be due).

It prints one JSON line per id with the outcome. One process serves every round so that the
rounds cost milliseconds, not an interpreter start each; each round is still two separate
processes on two separate connections racing for the one write lock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from ledgerflow.demo.reservations import (
    Outcome,
    ReservationBook,
    UnknownReservationError,
)

# Every wait is bounded, so a test that died cannot strand its workers.
WAIT_SECONDS_MAX = 30.0
# Short, because the barrier's jitter becomes the race's; long enough not to hog a CPU.
POLL_SECONDS = 0.0001


def _wait_until(condition: Callable[[], bool], deadline: float, what: str) -> None:
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(POLL_SECONDS)


def _one_round(book: ReservationBook, reservation_id: str, role: str, barrier: Path) -> Outcome:
    deadline = time.monotonic() + WAIT_SECONDS_MAX
    (barrier / f"{reservation_id}.{role}.ready").touch()
    go = barrier / f"{reservation_id}.go"
    _wait_until(go.exists, deadline, f"the barrier {go}")
    held = book.get(reservation_id)
    if held is None:
        raise UnknownReservationError(reservation_id)
    if role == "confirm":
        return book.confirm(reservation_id, held.version)
    expires_at = held.expires_at
    if expires_at - time.time() > WAIT_SECONDS_MAX:
        raise ValueError(f"reservation {reservation_id!r} expires too far in the future")
    _wait_until(lambda: time.time() >= expires_at, deadline, "the expiry")
    return book.expire(reservation_id, held.version)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", required=True, type=Path, help="the participant's SQLite file")
    parser.add_argument("--id", required=True, action="append", help="reservation id; repeatable")
    parser.add_argument("--role", required=True, choices=["confirm", "expire"])
    parser.add_argument("--barrier", required=True, type=Path, help="directory of barrier files")
    args = parser.parse_args(argv)
    with ReservationBook(args.db, actor=args.role) as book:
        for reservation_id in args.id:
            outcome = _one_round(book, reservation_id, args.role, args.barrier)
            line = {
                "id": reservation_id,
                "role": args.role,
                "result": outcome.result.value,
                "reason": outcome.reason,
                "reservation": asdict(outcome.reservation),
            }
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
