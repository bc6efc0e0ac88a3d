"""The participant kit: a service honours the effect protocol in its own database transaction.

Most services neither deduplicate nor answer lookups, and that is where exactly-once effects are
won or lost. A :class:`Kit` keeps one record per idempotency key in the service's own database
(SQLite through :mod:`sqlite3`, PostgreSQL through psycopg 3), and :meth:`Kit.apply` runs the
service's business write in the same transaction as that record, so the two commit together or
not at all. What the kit promises, and what a participant declared over it may therefore claim:

- A repeat of a key answers the first result (the same receipt) without running the business
  write again: ``deduplicates=True`` is true.
- :meth:`Kit.lookup` answers truthfully, and its "not applied" fences attempts 1..N of the key
  in the same transaction, so a late original numbered N or lower can never apply afterwards
  (the engine's re-dispatch, numbered N+1, still can): ``has_lookup=True`` is true.
- The kit vouches for "not applied" only where its record is complete: for a key first sent
  after its *vouches-since* watermark (when its table was made, raised to the cutoff of each
  :meth:`Kit.purge` and to the moment of :meth:`Kit.restored`), less a declared clock skew. A
  key it has no record of and may have forgotten is answered unknown, with the reason, and
  nothing is fenced: the engine then hands the effect to a person instead of sending the key
  again. The engine passes the key's first-sent time (``sent_at``) to a lookup that takes it;
  without one, the kit vouches only while it has never purged nor been restored (it cannot
  tell a store recreated from scratch, which is why the engine sends the time).
- A compensation (a request carrying ``original_key``) is recorded as a compensation: a key
  already applied as the other kind is refused, and so is a compensation sent under its
  original's own key, so a refund can never be answered with the charge's receipt.
- Keys are kept at least ``retention``; :meth:`Kit.purge` forgets older ones. The window must
  exceed the engine's retry horizon for the participant's effects (the longest a re-dispatch or
  a lookup of one key can come after the first), which :meth:`Kit.declaration` states.

Each operation on a key takes that key's row lock first (SQLite: the file's write lock, by
``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR UPDATE`` on the key's row), so an
application and a lookup of one key never interleave. The watermark is a row of the same table
(key ``''``, which no request may use), so a key table lost or restored takes its watermark
with it; a lookup reads it under a share lock and a purge raises it under an exclusive one.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ledgerflow import limits
from ledgerflow.errors import EffectRejectedError
from ledgerflow.extras import require_extra
from ledgerflow.model.compensation import Precondition
from ledgerflow.model.definition import check_name
from ledgerflow.model.effect import LookupAnswer
from ledgerflow.participant.kit_request import KitRequest

if TYPE_CHECKING:
    import psycopg

C = TypeVar("C")

# The kit's one table, in the participant's own database, shared by any number of namespaces.
TABLE = "ledgerflow_kit_keys"
# A lookup that names no attempt fences every attempt of its key.
_FENCE_ALL = 2**62
_EFFECT, _COMPENSATION = "effect", "compensation"
# The namespace's watermark row: its key, which no request may use, and its kind.
_WATERMARK_KEY, _WATERMARK = "", "watermark"

_DEFAULT_SKEW = timedelta(seconds=limits.KIT_CLOCK_SKEW_SECONDS)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    -- NULL until applied: a row that is only a fence has no kind.
    kind TEXT,
    original_key TEXT,
    operation TEXT,
    -- What was applied, so the same key sent for something else is refused, not answered.
    fingerprint TEXT,
    attempt BIGINT,
    receipt TEXT,
    applied_at DOUBLE PRECISION,
    -- Attempts 1..fenced_up_to of the key never apply (a lookup answered "not applied").
    fenced_up_to BIGINT,
    fenced_at DOUBLE PRECISION,
    touched_at DOUBLE PRECISION NOT NULL,
    -- The watermark row only (key ''): when the record began, and since when it is complete
    -- (raised by each purge's cutoff and by a restore).
    record_began_at DOUBLE PRECISION,
    vouches_since DOUBLE PRECISION,
    PRIMARY KEY (namespace, key)
)"""


@dataclass(frozen=True, slots=True)
class Applied:
    """The key is applied: ``receipt`` is the first application's, ``first`` says if it was
    this request that applied it (False: a repeat, answered without running the write)."""

    receipt: Any
    first: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """Nothing was applied by this request, proven: the business write refused it (an
    :class:`~ledgerflow.errors.EffectRejectedError`), its attempt is fenced, or its key is
    already used for something else."""

    error_code: str
    retryable: bool
    message: str


BusinessWrite = Callable[[C, KitRequest], Any]
"""The service's write: given the open transaction's connection and the request, it writes and
returns the receipt (JSON, not None); raising EffectRejectedError refuses, nothing written."""


class Kit(Generic[C]):
    """A participant's idempotency record, kept in its own database.

    Example::

        kit = Kit.sqlite("shop.db", namespace="inventory", retention=timedelta(days=7))

        def reserve(db: sqlite3.Connection, request: KitRequest) -> dict:
            cursor = db.execute("INSERT INTO holds (sku) VALUES (?)", (request.payload["sku"],))
            return {"hold": cursor.lastrowid}

        outcome = kit.apply("key-1", attempt=1, operation="reserve",
                            payload={"sku": "A"}, do=reserve)

    ``connect`` makes a connection (kept for reuse, possibly from another thread: a SQLite one
    needs ``check_same_thread=False``); the kit runs its own transactions on it, so it must not
    be inside one when handed over. ``namespace`` separates participants sharing one database.
    """

    def __init__(
        self,
        connect: Callable[[], C],
        *,
        namespace: str,
        retention: timedelta,
        clock: Callable[[], float] = time.time,
        clock_skew: timedelta = _DEFAULT_SKEW,
    ) -> None:
        check_name("kit namespace", namespace)
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise ValueError(f"retention must be a positive timedelta, not {retention!r}")
        if not isinstance(clock_skew, timedelta) or clock_skew < timedelta(0):
            raise ValueError(f"clock_skew must be a timedelta >= 0, not {clock_skew!r}")
        self.namespace = namespace
        self.retention = retention
        self.clock_skew = clock_skew
        self._connect = connect
        self._clock = clock
        self._idle: list[C] = []
        self._lock = threading.Lock()
        with self._transaction() as (db, dialect):
            if dialect == "postgres":
                # Two services starting at once would race CREATE TABLE IF NOT EXISTS.
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (TABLE,))
            db.execute(_SCHEMA)
            # A table made now (or a namespace new to it) is complete from now on, no earlier.
            self._watermark(db, dialect, lock="FOR SHARE")

    @classmethod
    def sqlite(
        cls,
        path: str,
        *,
        namespace: str,
        retention: timedelta,
        clock: Callable[[], float] = time.time,
        clock_skew: timedelta = _DEFAULT_SKEW,
    ) -> Kit[sqlite3.Connection]:
        """A kit on a SQLite file (WAL, synchronous writes)."""

        def connect() -> sqlite3.Connection:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            return db

        return Kit(
            connect, namespace=namespace, retention=retention, clock=clock, clock_skew=clock_skew
        )

    @classmethod
    def postgres(
        cls,
        conninfo: str,
        *,
        namespace: str,
        retention: timedelta,
        clock: Callable[[], float] = time.time,
        clock_skew: timedelta = _DEFAULT_SKEW,
    ) -> Kit[psycopg.Connection[Any]]:
        """A kit on a PostgreSQL database (``postgresql://...``, the postgres extra)."""
        require_extra("postgres", purpose="the participant kit on PostgreSQL")
        import psycopg

        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(conninfo, autocommit=True)

        return Kit(
            connect, namespace=namespace, retention=retention, clock=clock, clock_skew=clock_skew
        )

    def declaration(self) -> dict[str, Any]:
        """What the kit promises, for a checker to read (the ASGI adapter serves it)."""
        return {
            "kit": "ledgerflow.participant.Kit",
            "namespace": self.namespace,
            "deduplicates": True,
            "lookup": True,
            "lookup_fences": True,
            "compensation_keys_separate": True,
            "key_retention_seconds": self.retention.total_seconds(),
            # A key it may have forgotten is answered unknown, never "not applied".
            "lookup_unknown_when_forgotten": True,
            "clock_skew_seconds": self.clock_skew.total_seconds(),
        }

    @contextmanager
    def _transaction(self) -> Iterator[tuple[Any, str]]:
        with self._lock:
            db: Any = self._idle.pop() if self._idle else self._connect()
        if isinstance(db, sqlite3.Connection):
            dialect, scope = "sqlite", _sqlite_transaction(db)
        else:
            dialect, scope = "postgres", db.transaction()
        try:
            with scope:
                yield db, dialect
        except BaseException:
            if _broken(db):
                db.close()
                raise
            self._give_back(db)
            raise
        self._give_back(db)

    def _give_back(self, db: Any) -> None:
        with self._lock:
            if len(self._idle) < limits.KIT_IDLE_CONNECTIONS_MAX:
                self._idle.append(db)
                return
        db.close()

    def _locked_row(self, db: Any, dialect: str, key: str) -> dict[str, Any]:
        """The key's row, made if need be and locked until the transaction ends."""
        mark = "?" if dialect == "sqlite" else "%s"
        db.execute(
            f"INSERT INTO {TABLE} (namespace, key, touched_at) VALUES ({mark}, {mark}, {mark}) "
            "ON CONFLICT (namespace, key) DO NOTHING",
            (self.namespace, key, self._clock()),
        )
        cursor = db.execute(
            "SELECT kind, original_key, operation, fingerprint, receipt, fenced_up_to "
            f"FROM {TABLE} WHERE namespace = {mark} AND key = {mark}"
            + (" FOR UPDATE" if dialect == "postgres" else ""),
            (self.namespace, key),
        )
        names = [column[0] for column in cursor.description]
        return dict(zip(names, cursor.fetchone(), strict=True))

    def _update(self, db: Any, dialect: str, key: str, **columns: Any) -> None:
        mark = "?" if dialect == "sqlite" else "%s"
        columns["touched_at"] = self._clock()
        settings = ", ".join(f"{name} = {mark}" for name in columns)
        db.execute(
            f"UPDATE {TABLE} SET {settings} WHERE namespace = {mark} AND key = {mark}",
            (*columns.values(), self.namespace, key),
        )

    def apply(
        self,
        key: str,
        *,
        attempt: int,
        operation: str,
        payload: Any,
        do: BusinessWrite[C],
        original_key: str | None = None,
    ) -> Applied | Refused:
        """Apply ``key`` once: run ``do`` and record the key in one transaction, or answer a
        repeat with the first receipt, or refuse (fenced, key used otherwise, ``do`` refused).

        Anything else ``do`` raises rolls both back and propagates (the outcome is UNKNOWN to
        the engine until its lookup asks, which then truthfully answers "not applied").
        """
        request = KitRequest(
            key=key,
            attempt=attempt,
            operation=operation,
            payload=payload,
            original_key=original_key,
        )
        return self.apply_request(request, do)

    def apply_request(self, request: KitRequest, do: BusinessWrite[C]) -> Applied | Refused:
        """:meth:`apply` for a request already read (:meth:`KitRequest.from_wire`)."""
        _check_key(request.key)
        kind = _EFFECT if request.original_key is None else _COMPENSATION
        if request.original_key == request.key:
            return Refused(
                "compensation_key_is_original",
                False,
                f"compensation key {request.key!r} is its original's own key",
            )
        fingerprint = _fingerprint(request.operation, request.payload)
        try:
            return self._apply(request, do, kind=kind, fingerprint=fingerprint)
        except EffectRejectedError as refusal:
            # Raised through the transaction, which rolled the business write back.
            return Refused(refusal.error_code, refusal.retryable, str(refusal))

    def _apply(
        self, request: KitRequest, do: BusinessWrite[C], *, kind: str, fingerprint: str
    ) -> Applied | Refused:
        with self._transaction() as (db, dialect):
            row = self._locked_row(db, dialect, request.key)
            fenced = row["fenced_up_to"]
            if fenced is not None and request.attempt <= fenced:
                return _refused_fenced(request, fenced)
            if row["receipt"] is not None:
                return _repeat(request, row, kind=kind, fingerprint=fingerprint)
            receipt = do(db, request)
            encoded = _encoded_receipt(receipt)
            self._update(
                db,
                dialect,
                request.key,
                kind=kind,
                original_key=request.original_key,
                operation=request.operation,
                fingerprint=fingerprint,
                attempt=request.attempt,
                receipt=encoded,
                applied_at=self._clock(),
            )
        return Applied(json.loads(encoded), first=True)

    def lookup(
        self, key: str, attempt: int | None, *, sent_at: float | None = None
    ) -> LookupAnswer:
        """Applied with the first receipt; or not applied, fencing attempts 1..``attempt`` of
        ``key`` (all of them when ``attempt`` is None) in the same transaction; or unknown,
        fencing nothing, for a key the kit has no record of and may have forgotten.

        ``sent_at`` (seconds since the epoch, on the sender's clock) is when the key was first
        sent: the kit vouches for a key it has no record of only when that is at least its
        watermark, after taking ``clock_skew`` off it. Without it, only while the kit has
        never purged nor been restored."""
        _check_key(key)
        with self._transaction() as (db, dialect):
            began, since = self._watermark(db, dialect, lock="FOR SHARE")
            row = self._locked_row(db, dialect, key)
            if row["receipt"] is not None:
                return LookupAnswer.applied(json.loads(row["receipt"]))
            # A fence row was vouched for when it was made, and kept since: still no record.
            if row["fenced_up_to"] is None:
                doubt = self._doubt(began=began, since=since, sent_at=sent_at)
                if doubt is not None:
                    return LookupAnswer.unknown(doubt)
            asked = _FENCE_ALL if attempt is None else attempt
            # A fence only widens: a later, lower lookup must not unfence what was promised.
            fenced = max(asked, row["fenced_up_to"] or 0)
            self._update(db, dialect, key, fenced_up_to=fenced, fenced_at=self._clock())
        return LookupAnswer.not_applied()

    def _doubt(self, *, began: float, since: float, sent_at: float | None) -> str | None:
        """Why the kit cannot vouch that a key it has no record of was never applied, or None
        when its record covers the key's whole life."""
        if sent_at is None:
            if since <= began:
                return None
            return (
                f"no record of the key, no time it was first sent, and this kit forgot keys "
                f"(purged or restored): its record is complete only since {since:.3f}"
            )
        skew = self.clock_skew.total_seconds()
        if sent_at - skew >= since:
            return None
        return (
            f"no record of the key, first sent at {sent_at:.3f} (less {skew:g} s of clock "
            f"skew), before this kit's record is complete (since {since:.3f}): it may have "
            "been applied and forgotten"
        )

    def _watermark(self, db: Any, dialect: str, *, lock: str) -> tuple[float, float]:
        """The namespace's record began at, and is complete since: its row, made now if there
        is none (a new table or namespace, or the row lost with the table's others)."""
        mark = "?" if dialect == "sqlite" else "%s"
        now = self._clock()
        db.execute(
            f"INSERT INTO {TABLE} (namespace, key, kind, touched_at, record_began_at, "
            f"vouches_since) VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}) "
            "ON CONFLICT (namespace, key) DO NOTHING",
            (self.namespace, _WATERMARK_KEY, _WATERMARK, now, now, now),
        )
        found = db.execute(
            f"SELECT record_began_at, vouches_since FROM {TABLE} "
            f"WHERE namespace = {mark} AND key = {mark}"
            + (f" {lock}" if dialect == "postgres" else ""),
            (self.namespace, _WATERMARK_KEY),
        ).fetchone()
        return float(found[0]), float(found[1])

    def _raise_watermark(self, db: Any, dialect: str, moment: float) -> None:
        _, since = self._watermark(db, dialect, lock="FOR UPDATE")
        mark = "?" if dialect == "sqlite" else "%s"
        db.execute(
            f"UPDATE {TABLE} SET vouches_since = {mark}, touched_at = {mark} "
            f"WHERE namespace = {mark} AND key = {mark}",
            (max(since, moment), self._clock(), self.namespace, _WATERMARK_KEY),
        )

    def vouches_since(self) -> float:
        """Since when the kit's record of keys is complete (its watermark)."""
        with self._transaction() as (db, dialect):
            return self._watermark(db, dialect, lock="FOR SHARE")[1]

    def restored(self) -> None:
        """Say the kit's database was restored from a backup (or its keys otherwise lost): keys
        first sent before now are answered unknown from now on, never "not applied"."""
        with self._transaction() as (db, dialect):
            self._raise_watermark(db, dialect, self._clock())

    def precondition(
        self,
        key: str,
        *,
        original: str,
        reversed_by: Callable[[C, Any], Any] | None = None,
    ) -> Precondition:
        """May the compensation ``key`` still undo ``original``? Violated if the original was
        never applied; satisfied with evidence if ``reversed_by(connection, receipt)`` returns
        some (someone undid it already); holds otherwise."""
        with self._transaction() as (db, dialect):
            mark = "?" if dialect == "sqlite" else "%s"
            found = db.execute(
                f"SELECT receipt FROM {TABLE} WHERE namespace = {mark} AND key = {mark} "
                f"AND kind = {mark}",
                (self.namespace, original, _EFFECT),
            ).fetchone()
            if found is None or found[0] is None:
                return Precondition.violated(f"nothing to undo: {original} was never applied")
            evidence = None if reversed_by is None else reversed_by(db, json.loads(found[0]))
        return Precondition.holds() if evidence is None else Precondition.satisfied(evidence)

    def fences(self) -> list[tuple[str, int | None]]:
        """Every fenced key of the namespace and the attempt it is fenced up to (None: all)."""
        with self._transaction() as (db, dialect):
            mark = "?" if dialect == "sqlite" else "%s"
            rows = db.execute(
                f"SELECT key, fenced_up_to FROM {TABLE} "
                f"WHERE namespace = {mark} AND fenced_up_to IS NOT NULL ORDER BY key",
                (self.namespace,),
            ).fetchall()
        return [(key, None if up_to >= _FENCE_ALL else up_to) for key, up_to in rows]

    def purge(self, *, now: float | None = None) -> int:
        """Forget the keys (and fences) untouched for longer than the retention window; how
        many. A repeat of a forgotten key applies again: hence a window past the retry horizon.
        The watermark rises to the cutoff, so a lookup of a key first sent before it answers
        unknown instead of "not applied"."""
        cutoff = (self._clock() if now is None else now) - self.retention.total_seconds()
        with self._transaction() as (db, dialect):
            self._raise_watermark(db, dialect, cutoff)
            mark = "?" if dialect == "sqlite" else "%s"
            cursor = db.execute(
                f"DELETE FROM {TABLE} WHERE namespace = {mark} AND touched_at < {mark} "
                f"AND key <> {mark}",
                (self.namespace, cutoff, _WATERMARK_KEY),
            )
            count: int = cursor.rowcount
        return count

    def close(self) -> None:
        """Close the idle connections (one in use is closed when it is given back)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()  # type: ignore[attr-defined]  # C is a DB-API connection.


def _check_key(key: str) -> None:
    if not isinstance(key, str) or key == _WATERMARK_KEY:
        raise ValueError(f"an idempotency key must be a non-empty string, not {key!r}")


@contextmanager
def _sqlite_transaction(db: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE: the file's write lock from the start, so what is read is what is committed.
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _broken(db: Any) -> bool:
    """Whether a connection may not be reused after a failed transaction."""
    if isinstance(db, sqlite3.Connection):
        return db.in_transaction
    return bool(db.closed or db.broken)


def _fingerprint(operation: str, payload: Any) -> str:
    try:
        text = json.dumps([operation, payload], sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValueError(f"payload is not JSON: {error}") from error
    return hashlib.sha256(text.encode()).hexdigest()


def _encoded_receipt(receipt: Any) -> str:
    if receipt is None:
        raise TypeError("the business write returned no receipt (None): return what it applied")
    try:
        return json.dumps(receipt, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise TypeError(f"the business write's receipt is not JSON: {error}") from error


def _refused_fenced(request: KitRequest, fenced: int) -> Refused:
    covered = "every attempt" if fenced >= _FENCE_ALL else f"attempts 1..{fenced}"
    return Refused(
        "fenced",
        False,
        f"key {request.key!r} attempt {request.attempt}: a lookup answered not applied and "
        f"fenced {covered}",
    )


def _repeat(
    request: KitRequest, row: Mapping[str, Any], *, kind: str, fingerprint: str
) -> Applied | Refused:
    if row["kind"] != kind:
        return Refused(
            "key_used_by_other_kind",
            False,
            f"key {request.key!r} was applied as an {row['kind']}, not as a {kind}",
        )
    if row["fingerprint"] != fingerprint or row["original_key"] != request.original_key:
        return Refused(
            "key_reused",
            False,
            f"key {request.key!r} was applied for {row['operation']} with another payload",
        )
    return Applied(json.loads(row["receipt"]), first=False)
