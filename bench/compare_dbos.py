"""The DBOS Transact 3.4 side of ``bench/compare.py``: the same workloads, in a role subprocess.

DBOS is a process-wide singleton, so each run gets its own process. Workflows are ordinary
synchronous DBOS workflows started with ``DBOS.start_workflow`` (each runs on a thread of
DBOS's executor, unbounded by default) and awaited with ``handle.get_result()`` (which waits on
the thread's future: no polling).

Durability: on SQLite the orchestrator puts the file in WAL mode before DBOS opens it (the
mode is persistent) and a SQLAlchemy ``connect`` listener sets ``synchronous=FULL`` on every
connection DBOS opens and reads both PRAGMAs back; on PostgreSQL the same listener reads
``synchronous_commit`` back from DBOS's sessions. What was read is reported in the result.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import threading
import time
from typing import Any

import psycopg
from compare_common import (
    RUN_SECONDS_MAX,
    Desk,
    Marks,
    block_step2,
    ready_then_wait_go,
    report,
    say,
    sleep_until_killed,
    tell,
    wait_exit,
)
from dbos import DBOS, DBOSConfig
from psycopg import sql
from sqlalchemy import event
from sqlalchemy.engine import Engine as SaEngine

APP_NAME = "ledgerflow-bench"
# Pinned so the recovering process is the same application version as the killed one (DBOS
# only recovers pending workflows of its own version).
APP_VERSION = "bench-1"
STATUS_POLL_SECONDS = 0.01

DESK = Desk()
MARKS = Marks()
SEEN: dict[str, str] = {}  # durability settings read back from DBOS's own connections


@event.listens_for(SaEngine, "connect")
def durable_connection(dbapi_conn: Any, _record: Any) -> None:
    """Every connection DBOS opens: SQLite gets WAL + synchronous=FULL, set and read back;
    PostgreSQL's synchronous_commit is read back (DBOS never changes it)."""
    if isinstance(dbapi_conn, sqlite3.Connection):
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=FULL")
        SEEN["journal_mode"] = str(dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0])
        SEEN["synchronous"] = str(dbapi_conn.execute("PRAGMA synchronous").fetchone()[0])
    else:
        with dbapi_conn.cursor() as cur:
            cur.execute("SHOW synchronous_commit")
            SEEN["synchronous_commit"] = str(cur.fetchone()[0])
        dbapi_conn.rollback()  # SHOW opened a transaction; leave the connection clean


@DBOS.step()
def step_one(n: int) -> int:
    MARKS.step_ran(n)
    return n + 1


@DBOS.step()
def step_two(n: int) -> int:
    MARKS.step_ran(n)
    if block_step2():
        MARKS.step2_reached()
        threading.Event().wait()  # until SIGKILL
    return n + 2


@DBOS.step()
def step_three(n: int) -> int:
    MARKS.step_ran(n)
    return n + 3


@DBOS.workflow()
def steps3(n: int) -> int:
    return step_one(n) + step_two(n) + step_three(n)


@DBOS.step()
def record(n: int, i: int) -> dict[str, Any]:
    MARKS.step_ran(n)
    # The key is derived from the workflow and the call's place in it, as Ledgerflow derives
    # its idempotency key: the same on a re-execution after a crash.
    return DESK.apply(f"{DBOS.workflow_id}:{i}", {"n": n, "i": i})


@DBOS.workflow()
def effects3(n: int) -> int:
    return sum(record(n, i)["entry"] for i in range(3))


WORKFLOWS = {"steps3": steps3, "effects3": effects3}


class StatusCounts:
    """Counts DBOS's workflow_status rows from a side connection (plain SQL: polling
    ``DBOS.list_workflows`` would load every row)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def count(self, statuses: tuple[str, ...]) -> int:
        if self.args.backend == "sqlite":
            marks = ", ".join("?" for _ in statuses)
            with contextlib.closing(sqlite3.connect(self.args.path)) as conn:
                query = f"SELECT count(*) FROM workflow_status WHERE status IN ({marks})"
                return int(conn.execute(query, statuses).fetchone()[0])
        query = sql.SQL("SELECT count(*) FROM {}.workflow_status WHERE status = ANY(%s)").format(
            sql.Identifier(self.args.schema)
        )
        with psycopg.connect(self.args.base_url, autocommit=True) as pg:
            row = pg.execute(query, (list(statuses),)).fetchone()
            return int(row[0]) if row else 0


def launch(args: argparse.Namespace) -> None:
    config: DBOSConfig = {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "log_level": "WARNING",
    }
    if args.backend == "sqlite":
        config["system_database_url"] = f"sqlite:///{args.path}"
    else:
        config["system_database_url"] = args.base_url
        config["dbos_system_schema"] = args.schema
    DBOS(config=config)
    DBOS.launch()


def run_timed(args: argparse.Namespace) -> dict[str, Any]:
    n = args.n
    workflow = WORKFLOWS[args.workload]
    t0 = time.perf_counter()
    if args.mode == "sequential":
        for i in range(n):
            MARKS.start_called(i)
            DBOS.start_workflow(workflow, i).get_result()
    else:
        handles = []
        for i in range(n):
            MARKS.start_called(i)
            handles.append(DBOS.start_workflow(workflow, i))
        for handle in handles:
            handle.get_result()
    seconds = time.perf_counter() - t0
    return {
        "n": n,
        "seconds": round(seconds, 4),
        "wps": round(n / seconds, 2),
        "start_latency_ms": MARKS.start_latency_ms(),
        "succeeded": StatusCounts(args).count(("SUCCESS",)),
        "effect_calls": DESK.calls,
        "durability_seen": dict(SEEN),
    }


def run_recovery_load(args: argparse.Namespace) -> None:
    MARKS.expected = args.n
    for i in range(args.n):
        DBOS.start_workflow(WORKFLOWS[args.workload], i)
    if not MARKS.all_reached.wait(RUN_SECONDS_MAX):
        raise RuntimeError(f"only {MARKS.reached_step2} workflows reached step 2")
    tell("started")
    sleep_until_killed()


def run_recovery_finish(args: argparse.Namespace) -> None:
    """A fresh process: DBOS.launch() finds this executor's PENDING workflows and re-enqueues
    them (dbos/_recovery.py); its queue thread then runs them. Done when none is left PENDING
    or ENQUEUED."""
    counts = StatusCounts(args)
    ready_then_wait_go()
    t0 = time.perf_counter()
    launch(args)
    deadline = time.monotonic() + RUN_SECONDS_MAX
    while counts.count(("PENDING", "ENQUEUED")) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("DBOS did not finish the recovered workflows in time")
        time.sleep(STATUS_POLL_SECONDS)
    seconds = time.perf_counter() - t0
    report(
        {
            "n": args.n,
            "seconds": round(seconds, 4),
            "wps": round(args.n / seconds, 2),
            "start_latency_ms": MARKS.start_latency_ms(since=t0),
            "succeeded": counts.count(("SUCCESS",)),
            "durability_seen": dict(SEEN),
        }
    )
    wait_exit()


def run_role(args: argparse.Namespace) -> int:
    if args.mode == "recovery-finish":
        run_recovery_finish(args)
    else:
        launch(args)
        ready_then_wait_go()
        if args.mode == "recovery-load":
            run_recovery_load(args)
        else:
            figures = run_timed(args)
            say(f"dbos {args.workload} {args.mode}: {figures['wps']} wf/s")
            report(figures)
            wait_exit()
    DBOS.destroy()
    return 0
