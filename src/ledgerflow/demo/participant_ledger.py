"""A fake participant's own ledger: what it received, applied and fenced (demo and tests).

Each participant of :mod:`ledgerflow.demo.service` keeps this record in its own SQLite file
``<dir>/<name>.participant.db``. Tests compare it with the engine's ledger, so it must not
flatter the engine: a participant that does not deduplicate applies a repeated key again (a
second ``applied`` row), and a fenced dispatch is refused however late it arrives.

A deduplicating participant is built as a real service would be, with the participant kit
(:class:`~ledgerflow.participant.Kit`, in the same file): the kit's record of the key and the
``applied`` row commit in one transaction, a repeat is answered from the kit, and its lookup
and fences are the kit's. A participant that does not deduplicate cannot use the kit (which
always does), so its bookkeeping stays here. Nor can one that breaks its promises on
purpose (below): the kit would keep them.

Three flags make a participant break its promises on purpose, for ``ledgerflow
check-participant`` and the drift tests to catch: ``lying-lookup`` (the lookup answers
not-applied for every key and fences nothing), ``short-window`` (keys are remembered only
``SHORT_WINDOW_SECONDS``, as every applied answer reports), and :meth:`ParticipantLedger.lose_keys`
(the key table is lost while the record of what was applied survives, so a test can still
count applications; the participant knows it, and answers a lookup it cannot vouch for
"unknown").
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ledgerflow.demo.own_file import write_transaction
from ledgerflow.model.definition import check_name
from ledgerflow.model.effect import LookupVerdict
from ledgerflow.participant import Kit, KitRequest, Refused
from ledgerflow.participant.kit import TABLE as KIT_TABLE

CONTROL_PREFIX = "_control"
# How long a demo participant's kit keeps its keys: past any retry horizon of the demo.
KIT_RETENTION = timedelta(days=30)
SHORT_WINDOW_SECONDS = 1.0
_FLAGS = ("dedupe", "lookup", "lying-lookup", "short-window")


@dataclass(frozen=True, slots=True)
class ParticipantSpec:
    """One participant the service hosts and the promises it keeps."""

    name: str
    deduplicates: bool = False
    lookup: bool = False
    lying_lookup: bool = False
    # Seconds a key is remembered; None: for ever.
    key_window_seconds: float | None = None

    def __post_init__(self) -> None:
        check_name("participant", self.name)
        if self.name == CONTROL_PREFIX:
            raise ValueError(f"participant name {self.name!r} is reserved")

    @classmethod
    def parse(cls, text: str) -> ParticipantSpec:
        """Read ``name:flags``: flags of ``dedupe``, ``lookup``, ``lying-lookup``, ``short-window``
        joined by '+', or ``none``."""
        name, _, flags_text = text.partition(":")
        flags = {flag.strip() for flag in flags_text.split("+") if flag.strip()} or {"none"}
        unknown = flags - {*_FLAGS, "none"}
        if unknown or ("none" in flags and len(flags) > 1):
            raise ValueError(
                f"participant {text!r}: flags are {', '.join(map(repr, _FLAGS))} joined by '+', "
                "or 'none'"
            )
        return cls(
            name=name,
            deduplicates="dedupe" in flags,
            lookup="lookup" in flags or "lying-lookup" in flags,
            lying_lookup="lying-lookup" in flags,
            key_window_seconds=SHORT_WINDOW_SECONDS if "short-window" in flags else None,
        )


class ParticipantLedger:
    """One participant's own record, in its own SQLite file.

    Every operation is one transaction under a lock, so a lookup's fence and an apply's
    check-then-insert cannot interleave: that atomicity is the fencing promise.
    """

    def __init__(self, directory: Path, spec: ParticipantSpec) -> None:
        self.spec = spec
        self.path = directory / f"{spec.name}.participant.db"
        self._lock = threading.Lock()
        # Calls arrive on worker threads (asyncio.to_thread); the lock serialises them.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(
            """
            CREATE TABLE IF NOT EXISTS applied (
                seq INTEGER PRIMARY KEY, key TEXT, operation TEXT, payload TEXT,
                attempt INT, applied_at REAL, effect_id TEXT);
            CREATE INDEX IF NOT EXISTS applied_by_key ON applied (key, seq);
            CREATE TABLE IF NOT EXISTS received (
                seq INTEGER PRIMARY KEY, key TEXT, operation TEXT, attempt INT,
                received_at REAL);
            CREATE TABLE IF NOT EXISTS fenced (
                key TEXT PRIMARY KEY, up_to_attempt INT, fenced_at REAL);
            CREATE TABLE IF NOT EXISTS reversed (
                key TEXT PRIMARY KEY, reversed_by TEXT, reversed_at REAL);
            CREATE TABLE IF NOT EXISTS keys_lost (
                up_to_seq INT, lost_at REAL);
            """
        )
        self.kit: Kit[sqlite3.Connection] | None = None
        honest = not spec.lying_lookup and spec.key_window_seconds is None
        if spec.deduplicates and honest and not self._keys_were_lost():
            self.kit = self._open_kit()

    def _open_kit(self) -> Kit[sqlite3.Connection]:
        # The engine runs on this machine: its clock is the kit's, no skew to allow for.
        return Kit.sqlite(
            str(self.path),
            namespace=self.spec.name,
            retention=KIT_RETENTION,
            clock_skew=timedelta(0),
        )

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db, self._lock)

    def _receipt(self, row: sqlite3.Row) -> dict[str, Any]:
        return {
            "participant": self.spec.name,
            "operation": row["operation"],
            "key": row["key"],
            "effect_id": row["effect_id"],
            "applied_seq": row["seq"],
        }

    def _answer(self, receipt: dict[str, Any], **more: Any) -> dict[str, Any]:
        answer = {"status": "applied", "receipt": receipt, **more}
        if self.spec.key_window_seconds is not None:
            answer["key_retention_seconds"] = self.spec.key_window_seconds
        return answer

    def _first_application(self, db: sqlite3.Connection, key: str) -> sqlite3.Row | None:
        """The first application of ``key`` the participant still remembers: none from before
        its keys were lost, none older than its key window."""
        window = self.spec.key_window_seconds
        since = 0.0 if window is None else time.time() - window
        row: sqlite3.Row | None = db.execute(
            "SELECT seq, key, operation, effect_id FROM applied WHERE key = ? AND applied_at >= ? "
            "AND seq > (SELECT coalesce(max(up_to_seq), 0) FROM keys_lost) ORDER BY seq LIMIT 1",
            (key, since),
        ).fetchone()
        return row

    def _keys_were_lost(self) -> bool:
        with self._transaction() as db:
            return db.execute("SELECT 1 FROM keys_lost").fetchone() is not None

    def lose_keys(self) -> None:
        """Forget every key and fence (a restore without the key table); the record stays.
        A participant that kept its keys with the kit stops using it: its keys are gone."""
        if self.kit is not None:
            self.kit.close()
            self.kit = None
        with self._transaction() as db:
            db.execute(
                "INSERT INTO keys_lost (up_to_seq, lost_at) "
                "SELECT coalesce(max(seq), 0), ? FROM applied",
                (time.time(),),
            )
            db.execute("DELETE FROM fenced")

    def fresh_kit(self) -> None:
        """Start the kit on a fresh table: every key and fence gone, as a restore without the
        kit's table would leave it; the record of applications stays. Unlike
        :meth:`lose_keys`, nothing here tells the lookup: the kit's own watermark must."""
        if self.kit is None:
            return
        self.kit.close()
        with self._transaction() as db:
            db.execute(f"DROP TABLE IF EXISTS {KIT_TABLE}")
        self.kit = self._open_kit()

    def record_received(self, key: str, operation: str, attempt: int) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO received (key, operation, attempt, received_at) VALUES (?, ?, ?, ?)",
                (key, operation, attempt, time.time()),
            )

    def _insert_applied(self, db: sqlite3.Connection, request: KitRequest) -> dict[str, Any]:
        """The business write: one ``applied`` row, in the transaction it is given."""
        cursor = db.execute(
            "INSERT INTO applied (key, operation, payload, attempt, applied_at, effect_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                request.key,
                request.operation,
                json.dumps(request.payload),
                request.attempt,
                time.time(),
                request.effect_id,
            ),
        )
        return {
            "participant": self.spec.name,
            "operation": request.operation,
            "key": request.key,
            "effect_id": request.effect_id,
            "applied_seq": cursor.lastrowid,
        }

    def _kit_apply(
        self, kit: Kit[sqlite3.Connection], request: KitRequest
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:  # this process's other writes to the file wait for the kit's
            outcome = kit.apply_request(request, self._insert_applied)
        if isinstance(outcome, Refused):
            refused = {"status": "rejected", "error_code": outcome.error_code}
            return 409, {**refused, "retryable": outcome.retryable, "message": outcome.message}
        if outcome.first:
            return 200, self._answer(outcome.receipt)
        return 200, self._answer(outcome.receipt, duplicate=True)

    def apply(
        self,
        key: str,
        operation: str,
        payload: str,
        attempt: int,
        original_key: str | None = None,
        effect_id: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        if self.kit is not None:
            request = KitRequest(
                key=key,
                attempt=attempt,
                operation=operation,
                payload=json.loads(payload),
                original_key=original_key,
                effect_id=effect_id,
            )
            return self._kit_apply(self.kit, request)
        with self._transaction() as db:
            # up_to_attempt NULL fences every attempt of the key.
            fence = db.execute(
                "SELECT 1 FROM fenced "
                "WHERE key = ? AND (up_to_attempt IS NULL OR ? <= up_to_attempt)",
                (key, attempt),
            ).fetchone()
            if fence is not None:
                return 409, {"status": "rejected", "error_code": "fenced", "retryable": False}
            if self.spec.deduplicates:
                first = self._first_application(db, key)
                if first is not None:
                    return 200, self._answer(self._receipt(first), duplicate=True)
            cursor = db.execute(
                "INSERT INTO applied (key, operation, payload, attempt, applied_at, effect_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, operation, payload, attempt, time.time(), effect_id),
            )
            receipt = {
                "participant": self.spec.name,
                "operation": operation,
                "key": key,
                "effect_id": effect_id,
                "applied_seq": cursor.lastrowid,
            }
            return 200, self._answer(receipt)

    def lookup(
        self, key: str, attempt: int | None, *, sent_at: float | None = None
    ) -> dict[str, Any]:
        if self.spec.lying_lookup:
            return {"verdict": "not-applied"}
        if self.kit is not None:
            with self._lock:
                answer = self.kit.lookup(key, attempt, sent_at=sent_at)
            if answer.verdict is LookupVerdict.APPLIED:
                return {"verdict": answer.verdict.value, "evidence": answer.evidence}
            if answer.verdict is LookupVerdict.UNKNOWN:
                return {"verdict": answer.verdict.value, "reason": answer.reason}
            return {"verdict": answer.verdict.value}
        with self._transaction() as db:
            first = self._first_application(db, key)
            if first is not None:
                return {"verdict": "applied", "evidence": self._receipt(first)}
            if db.execute("SELECT 1 FROM keys_lost").fetchone() is not None:
                # Absence proves nothing once the keys were lost: the key may be among them.
                return {"verdict": "unknown", "reason": "this participant lost its keys"}
            # A fence only ever widens: a later, lower lookup must not unfence what was promised.
            db.execute(
                "INSERT INTO fenced (key, up_to_attempt, fenced_at) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET up_to_attempt = CASE "
                "WHEN fenced.up_to_attempt IS NULL OR excluded.up_to_attempt IS NULL THEN NULL "
                "ELSE max(fenced.up_to_attempt, excluded.up_to_attempt) END",
                (key, attempt, time.time()),
            )
            return {"verdict": "not-applied"}

    def mark_reversed(self, key: str, by: str) -> None:
        """Record that someone outside the engine already undid ``key`` (the first one counts)."""
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO reversed (key, reversed_by, reversed_at) VALUES (?, ?, ?)",
                (key, by, time.time()),
            )

    def precondition(self, original: str) -> dict[str, Any]:
        with self._transaction() as db:
            if self._first_application(db, original) is None:
                why = f"nothing to undo: {original} was never applied"
                return {"verdict": "violated", "reason": why}
            row = db.execute("SELECT reversed_by FROM reversed WHERE key = ?", (original,))
            found = row.fetchone()
        if found is not None:
            return {"verdict": "satisfied", "evidence": {"reversed_by": found[0]}}
        return {"verdict": "holds"}

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        with self._transaction() as db:
            applied = [
                {**dict(row), "payload": json.loads(row["payload"])}
                for row in db.execute("SELECT * FROM applied ORDER BY seq")
            ]
            received = [dict(row) for row in db.execute("SELECT * FROM received ORDER BY seq")]
            fenced = [dict(row) for row in db.execute("SELECT * FROM fenced ORDER BY key")]
            reverse = [dict(row) for row in db.execute("SELECT * FROM reversed ORDER BY key")]
        if self.kit is not None:
            fenced = [{"key": k, "up_to_attempt": n} for k, n in self.kit.fences()]
        return {"applied": applied, "received": received, "fenced": fenced, "reversed": reverse}

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self.kit is not None:
                self.kit.close()
