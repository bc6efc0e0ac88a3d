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
- A compensation (a request carrying ``original_key``) is recorded as a compensation: a key
  already applied as the other kind is refused, and so is a compensation sent under its
  original's own key, so a refund can never be answered with the charge's receipt.
- Keys are kept at least ``retention``; :meth:`Kit.purge` forgets older ones. The window must
  exceed the engine's retry horizon for the participant's effects (the longest a re-dispatch or
  a lookup of one key can come after the first), which :meth:`Kit.declaration` states.

Each operation on a key takes that key's row lock first (SQLite: the file's write lock, by
``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR UPDATE`` on the key's row), so an
application and a lookup of one key never interleave.
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

if TYPE_CHECKING:
    import psycopg

C = TypeVar("C")

# The kit's one table, in the participant's own database, shared by any number of namespaces.
TABLE = "ledgerflow_kit_keys"
# A lookup that names no attempt fences every attempt of its key.
_FENCE_ALL = 2**62
_EFFECT, _COMPENSATION = "effect", "compensation"

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
    PRIMARY KEY (namespace, key)
)"""


@dataclass(frozen=True, slots=True, kw_only=True)
class KitRequest:
    """One request to apply, as the engine sends it (over HTTP or a broker)."""

    key: str
    """The effect's idempotency key (a compensation's own key)."""
    attempt: int
    """The attempt number; a lookup's fence refuses the attempts it covers."""
    operation: str
    payload: Any = None
    original_key: str | None = None
    """With a compensation: the key of the effect it undoes."""
    effect_id: str | None = None
    instance_id: str | None = None

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> KitRequest:
        """Read the engine's request body; ``ValueError`` saying what is wrong with it."""
        key, operation = body.get("key"), body.get("operation")
        attempt, original = body.get("attempt"), body.get("original_key")
        if not isinstance(key, str) or not key:
            raise ValueError("'key' must be a non-empty string")
        if not isinstance(operation, str) or not operation:
            raise ValueError("'operation' must be a non-empty string")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ValueError("'attempt' must be a positive integer")
        if original is not None and (not isinstance(original, str) or not original):
            raise ValueError("'original_key' must be a non-empty string when given")
        ids = {name: body.get(name) for name in ("effect_id", "instance_id")}
        for name, value in ids.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name!r} must be a string when given")
        return cls(
            key=key,
            attempt=attempt,
            operation=operation,
            payload=body.get("payload"),
            original_key=original,
            effect_id=ids["effect_id"],
            instance_id=ids["instance_id"],
        )


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
    ) -> None:
        check_name("kit namespace", namespace)
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise ValueError(f"retention must be a positive timedelta, not {retention!r}")
        self.namespace = namespace
        self.retention = retention
        self._connect = connect
        self._clock = clock
        self._idle: list[C] = []
        self._lock = threading.Lock()
        with self._transaction() as (db, dialect):
            if dialect == "postgres":
                # Two services starting at once would race CREATE TABLE IF NOT EXISTS.
                db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (TABLE,))
            db.execute(_SCHEMA)

    @classmethod
    def sqlite(
        cls,
        path: str,
        *,
        namespace: str,
        retention: timedelta,
        clock: Callable[[], float] = time.time,
    ) -> Kit[sqlite3.Connection]:
        """A kit on a SQLite file (WAL, synchronous writes)."""

        def connect() -> sqlite3.Connection:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            return db

        return Kit(connect, namespace=namespace, retention=retention, clock=clock)

    @classmethod
    def postgres(
        cls,
        conninfo: str,
        *,
        namespace: str,
        retention: timedelta,
        clock: Callable[[], float] = time.time,
    ) -> Kit[psycopg.Connection[Any]]:
        """A kit on a PostgreSQL database (``postgresql://...``, the postgres extra)."""
        require_extra("postgres", purpose="the participant kit on PostgreSQL")
        import psycopg

        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(conninfo, autocommit=True)

        return Kit(connect, namespace=namespace, retention=retention, clock=clock)

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

    def lookup(self, key: str, attempt: int | None) -> LookupAnswer:
        """Applied with the first receipt, or not applied, fencing attempts 1..``attempt`` of
        ``key`` (all of them when ``attempt`` is None) in the same transaction."""
        with self._transaction() as (db, dialect):
            row = self._locked_row(db, dialect, key)
            if row["receipt"] is not None:
                return LookupAnswer.applied(json.loads(row["receipt"]))
            asked = _FENCE_ALL if attempt is None else attempt
            # A fence only widens: a later, lower lookup must not unfence what was promised.
            fenced = max(asked, row["fenced_up_to"] or 0)
            self._update(db, dialect, key, fenced_up_to=fenced, fenced_at=self._clock())
        return LookupAnswer.not_applied()

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
        many. A repeat of a forgotten key applies again: hence a window past the retry horizon."""
        cutoff = (self._clock() if now is None else now) - self.retention.total_seconds()
        with self._transaction() as (db, dialect):
            mark = "?" if dialect == "sqlite" else "%s"
            cursor = db.execute(
                f"DELETE FROM {TABLE} WHERE namespace = {mark} AND touched_at < {mark}",
                (self.namespace, cutoff),
            )
            count: int = cursor.rowcount
        return count

    def close(self) -> None:
        """Close the idle connections (one in use is closed when it is given back)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()  # type: ignore[attr-defined]  # C is a DB-API connection.


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
