"""Push wake-ups from the journal itself, so an idle worker need not wait for its poll
(internal).

A signal, callback, start or cancel committed by another process makes work due for a worker
that is asleep until its next poll. Each backend tells the worker sooner in its own way, and
polling stays the floor for anything a push misses:

* PostgreSQL: after a commit that made work due, a per-process :class:`PgNotifier` sends one
  payload-free ``NOTIFY`` on the schema's channel, from its own autocommit connection, at most
  once per short window (rings within the window share the next one). Never inside an engine
  write transaction: a transaction that notifies takes a database-wide lock at commit, so
  notifying commits serialise (near 500-600/s); here only the notifier's own tiny commits do,
  at most one per window per process. Each worker holds one dedicated listening connection
  (:class:`PgListener`), probed at start by a NOTIFY sent the way real ones are (from another
  connection): behind PgBouncer's transaction pooling LISTEN silently receives nothing, so a
  probe that hears nothing within its bound means "poll only". A dropped listening connection
  is reconnected, and its worker told to look once (a ring may have been missed meanwhile).
* SQLite: :class:`SqliteWatch` reads ``PRAGMA data_version`` at a short interval while its
  worker is idle, on the store's connection: the value changes whenever another connection (of
  another process, or another store on the file) committed to it.

A wake only says "look now": the worker claims as it would at its poll, so a spurious wake
costs one claim and a missed one at most a poll.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

import psycopg
from psycopg import sql

from ledgerflow import limits

log = logging.getLogger("ledgerflow.wakeups")

# Names of the statements whose commit can make work due for another worker: a start, an
# event delivered (signal, callback, update, a child's end), a cancel, a start brought forward,
# a repaired or held instance made due again. Ringing for others is harmless (one claim).
DUE_STATEMENTS = frozenset(
    {
        "insert_instance",
        "wake_instance",
        "wake_held",
        "request_cancel",
        "cancel_children",
        "start_now",
        "redue_repaired_instance",
    }
)
_CHANNEL_PREFIX = "ledgerflow_wake_"
# PostgreSQL truncates identifiers (and refuses channel names) past 63 bytes.
_IDENTIFIER_BYTES_MAX = 63
_APPLICATION_NAME = "ledgerflow-listen"
# "off": no NOTIFY is sent and no worker listens or watches (every worker polls), e.g. to
# compare, or where a database's NOTIFY is not wanted at all.
ENABLED_VARIABLE = "LEDGERFLOW_PUSH_WAKEUPS"


def push_wakeups_enabled() -> bool:
    """Whether this process sends and hears push wake-ups (``LEDGERFLOW_PUSH_WAKEUPS``)."""
    return os.environ.get(ENABLED_VARIABLE, "on").strip().lower() not in ("off", "0", "false")


class WakeSource(Protocol):
    """What a worker takes of a store's push wake-ups."""

    def start(self, wake: Callable[[], None], pushing: Callable[[bool], None]) -> bool:
        """Begin (blocking, bounded): ``wake`` is called from another thread whenever work may
        have become due; ``pushing`` whenever pushes start or stop arriving. False: pushes
        cannot arrive here (the worker only polls)."""
        ...

    def idle(self, idle: bool) -> None:
        """The worker is asleep (True) or busy again (False): a source may watch only then."""
        ...

    def close(self) -> None: ...


def channel_of(schema: str) -> str:
    """The NOTIFY channel of one schema: journals in other schemas never ring each other."""
    name = _CHANNEL_PREFIX + schema
    if len(name.encode()) <= _IDENTIFIER_BYTES_MAX:
        return name
    return _CHANNEL_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:24]


def _notify(conn: psycopg.Connection[object], channel: str) -> None:
    conn.execute("SELECT pg_notify(%s, '')", (channel,))


class PgNotifier:
    """One process's doorbell for one schema: at most one NOTIFY per window, after commit."""

    def __init__(self, conninfo: str, channel: str, *, window_seconds: float) -> None:
        self._conninfo = conninfo
        self.channel = channel
        self.window_seconds = window_seconds
        self._wanted = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # A ring not sent yet (set before _wanted, read after it is cleared: none is lost, and
        # closing still sends the last one).
        self._pending = False
        # NOTIFYs sent so far (each one commit of the notifier's own connection).
        self.sent = 0

    def ring(self) -> None:
        """Work became due (its transaction has committed): notify soon, once per window."""
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._closed.is_set():
                    self._thread = threading.Thread(
                        target=self._send_forever, name="ledgerflow-notifier", daemon=True
                    )
                    self._thread.start()
        self._pending = True
        self._wanted.set()

    def _send_forever(self) -> None:
        conn: psycopg.Connection[object] | None = None
        failed_at: float | None = None
        try:
            while True:
                if self._closed.is_set() and not self._pending:
                    return
                self._wanted.wait()
                self._wanted.clear()
                if not self._pending:
                    continue
                self._pending = False
                try:
                    if conn is None:
                        conn = psycopg.connect(self._conninfo, autocommit=True)
                        # A NOTIFY is a commit of its own; a hint need not wait for its WAL to
                        # reach the disk (listeners hear it at commit either way): no fsync on
                        # the wake-up's path, none paid per window.
                        conn.execute("SET synchronous_commit = off")
                    _notify(conn, self.channel)
                    self.sent += 1
                    failed_at = None
                except psycopg.Error as exc:
                    # This ring is lost: the listeners' poll finds the work. Said once per
                    # outage, not once per ring.
                    if failed_at is None:
                        log.warning("could not send a wake-up NOTIFY (workers poll): %s", exc)
                    failed_at = time.monotonic()
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._closed.wait(limits.WAKEUP_RECONNECT_SECONDS_MAX)
                    continue
                # Rings within the window wait for the next NOTIFY: one per window at most.
                self._closed.wait(self.window_seconds)
        finally:
            if conn is not None:
                conn.close()

    def close(self) -> None:
        self._closed.set()
        self._wanted.set()
        thread = self._thread
        if thread is not None:
            thread.join(limits.WAKEUP_CLOSE_SECONDS_MAX)


class PgListener:
    """A worker's dedicated LISTEN connection, probed at start, reconnected when it drops."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        *,
        probe: Callable[[], None],
        probe_seconds: float,
    ) -> None:
        self._conninfo = conninfo
        self.channel = channel
        # Sends one NOTIFY the way commits do (not on the listening connection itself).
        self._probe = probe
        self.probe_seconds = probe_seconds
        self._closed = threading.Event()
        # Written to by close(): the listening thread's select() returns at once. Made when
        # the thread starts: a listener never started (a worker never run) holds no socket.
        self._stop: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[object] | None = None
        # The backend pid of the listening connection now (None while down): tests end it.
        self.backend_pid: int | None = None

    def _listen(self) -> psycopg.Connection[object]:
        conn = psycopg.connect(self._conninfo, autocommit=True, application_name=_APPLICATION_NAME)
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error:
            conn.close()
            raise
        self.backend_pid = conn.info.backend_pid
        return conn

    def start(self, wake: Callable[[], None], pushing: Callable[[bool], None]) -> bool:
        try:
            conn = self._listen()
        except psycopg.Error as exc:
            log.warning("cannot LISTEN for wake-ups; the worker polls: %s", exc)
            pushing(False)
            return False
        heard = False
        try:
            self._probe()
            for _ in conn.notifies(timeout=self.probe_seconds, stop_after=1):
                heard = True
        except psycopg.Error as exc:
            log.warning("the wake-up probe failed; the worker polls: %s", exc)
        if not heard:
            log.warning(
                "no wake-up NOTIFY arrived within %.1fs of the probe (a pooler in transaction "
                "mode, e.g. PgBouncer, drops LISTEN; point LEDGERFLOW_LISTEN_URL at the server "
                "directly): this worker polls",
                self.probe_seconds,
            )
            conn.close()
            self.backend_pid = None
            pushing(False)
            return False
        self._conn = conn
        pushing(True)
        self._stop = socket.socketpair()
        self._thread = threading.Thread(
            target=self._hear_forever, args=(wake, pushing), name="ledgerflow-listener", daemon=True
        )
        self._thread.start()
        return True

    def _hear_forever(self, wake: Callable[[], None], pushing: Callable[[bool], None]) -> None:
        conn = self._conn
        try:
            while not self._closed.is_set():
                if conn is None:
                    conn = self._reconnect(pushing)
                    if conn is None:
                        return
                    wake()  # a ring may have come while nobody listened
                try:
                    if self._hear(conn):
                        wake()
                except (psycopg.Error, OSError) as exc:
                    if self._closed.is_set():
                        return
                    log.warning("the wake-up listening connection dropped: %s", exc)
                    pushing(False)
                    conn.close()
                    conn = self.backend_pid = None
        finally:
            if conn is not None:
                conn.close()

    def _hear(self, conn: psycopg.Connection[object]) -> bool:
        """Wait for the socket (or close()); True if a notification arrived."""
        assert self._stop is not None, "heard only by the thread start() made"
        stop = self._stop[0].fileno()
        ready, _, _ = select.select([conn.fileno(), stop], [], [])
        if stop in ready:
            return False
        pgconn = conn.pgconn
        pgconn.consume_input()
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            raise psycopg.OperationalError("connection lost")
        heard = False
        while pgconn.notifies() is not None:
            heard = True
        if not heard and not pgconn.is_busy():
            # Readable yet nothing to read: the server closed the connection.
            probe = conn.execute("SELECT 1")
            probe.fetchall()
        return heard

    def _reconnect(self, pushing: Callable[[bool], None]) -> psycopg.Connection[object] | None:
        pause = limits.WAKEUP_RECONNECT_SECONDS_MIN
        while not self._closed.is_set():
            try:
                conn = self._listen()
            except psycopg.Error as exc:
                log.debug("wake-up listener still cannot reconnect: %s", exc)
                self._closed.wait(pause)
                pause = min(pause * 2, limits.WAKEUP_RECONNECT_SECONDS_MAX)
                continue
            log.info("wake-up listener connected again")
            pushing(True)
            return conn
        return None

    def idle(self, idle: bool) -> None:
        """NOTIFYs are heard whether idle or not: nothing to do."""

    def close(self) -> None:
        self._closed.set()
        if self._stop is not None:
            self._stop[1].send(b"x")
        thread = self._thread
        if thread is not None:
            thread.join(limits.WAKEUP_CLOSE_SECONDS_MAX)
        elif self._conn is not None:
            self._conn.close()
        if self._stop is not None:
            for end in self._stop:
                end.close()
            self._stop = None


class SqliteWatch:
    """Reads ``PRAGMA data_version`` at a short interval while its worker is idle.

    ``read`` reads it on the store's own connection, where it changes only with the commits
    of *other* connections: the worker's own commits (and every commit of its engine) never
    wake it for nothing. None: the store is busy now (look at the next interval)."""

    def __init__(self, read: Callable[[], int | None], *, interval_seconds: float) -> None:
        self._read = read
        self.interval_seconds = interval_seconds
        self._idle = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, wake: Callable[[], None], pushing: Callable[[bool], None]) -> bool:
        pushing(True)
        self._thread = threading.Thread(
            target=self._watch_forever, args=(wake,), name="ledgerflow-watch", daemon=True
        )
        self._thread.start()
        return True

    def _watch_forever(self, wake: Callable[[], None]) -> None:
        seen = self._read()
        while not self._closed.is_set():
            self._idle.wait()
            if self._closed.wait(self.interval_seconds):
                return
            now = self._read()
            if now is None:
                continue
            # Compared with the last value read, even one read before the worker was busy: a
            # commit between its last claim and this watch still wakes it.
            if now != seen:
                if seen is not None:
                    wake()
                seen = now

    def idle(self, idle: bool) -> None:
        if idle:
            self._idle.set()
        else:
            self._idle.clear()

    def close(self) -> None:
        self._closed.set()
        self._idle.set()
        thread = self._thread
        if thread is not None:
            thread.join(limits.WAKEUP_CLOSE_SECONDS_MAX)
