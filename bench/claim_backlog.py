"""Claims at any backlog: claim and claim+park rates at 10,000 and 1,000,000 runnable instances.

    python bench/claim_backlog.py --quick                 # 1,000 and 20,000, both backends
    python bench/claim_backlog.py                         # 10,000 and 1,000,000
    python bench/claim_backlog.py --without-claim-index   # the same with 0024's index dropped

For each backend and size, a fresh store (a new SQLite file, a new PostgreSQL schema) is
migrated by ``open_store``, one instance is started through the store's own start path
(``start_instance``), and the backlog is that row cloned N-1 times by one ``INSERT ... SELECT``
(column for column: only the id, the business key and the due time differ, due times spread
over the past hour so that the claim's order is not the insertion order). The table is then
ANALYZEd, as autovacuum would.

Then, through the real claim path (``ClaimStore.claim``, storage/sql_claims.py, with the
capability routing a worker sends and the worker's batch of ``limits.CLAIM_BATCH_MAX``), a
fixed number of instances is claimed batch after batch and each batch parked (one group commit
of ``Release`` writes, due a day later, as a worker parks a waiting instance): ``claims_per_s``
counts the claim calls' time only, ``claim_park_per_s`` both. The same count at both sizes, so
the larger backlog is measured over the same work, in ``--rounds`` rounds in which the sizes take
turns (every store is filled first and stays open): on a shared machine whose load drifts, each
size meets the same drift. The figure is the median round.

Then ``--in-flight`` instances are claimed by another worker and left owned under a live lease
(a worker's instances in flight, each holding an INTENDED effect whose heartbeat is not due):
each later claim must pass over them, and on PostgreSQL the lapsed-heartbeat test (an EXISTS
over lf_effects, migration 0020) runs for each of them. Measured again.

The claim query's plan is shown at each stage: ``EXPLAIN (ANALYZE, BUFFERS)`` on PostgreSQL
(custom and generic plan: the store prepares its statements), ``EXPLAIN QUERY PLAN`` on SQLite.
Progress goes to stderr; the last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from ledgerflow import limits
from ledgerflow.ledger.records import Commit, NewInstance, Release
from ledgerflow.model.ids import BusinessKey, InstanceId, TenantId, WorkerId
from ledgerflow.model.routing import Served, served_json
from ledgerflow.storage.postgres import PostgresStore
from ledgerflow.storage.postgres_url import parse as postgres_target
from ledgerflow.storage.sqlite import SqliteStore
from ledgerflow.storage.url import POSTGRES_OPTIONS, open_store, split_query

BACKENDS = ("sqlite", "postgres")
FULL = {"sizes": [10_000, 1_000_000], "claims": 4_000, "in_flight": 1_000}
QUICK = {"sizes": [1_000, 20_000], "claims": 300, "in_flight": 100}
PG_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
SCHEMA_PREFIX = "bench_backlog"
CLAIM_INDEX = "lf_instances_claimable"  # migration 0024
SERVED = Served(workflow_name="backlog", workflow_version=1, fingerprint="f" * 16)
OWNER = WorkerId("w-bench")
OTHER = WorkerId("w-in-flight")
LEASE_SECONDS = 3600.0
PARK_SECONDS = 86_400.0  # a parked instance is due again a day later: out of the measured range
SPREAD_SECONDS = 3600.0
FILL_CHUNK = 200_000  # rows per INSERT ... SELECT: progress shows, no transaction is huge


def say(text: str) -> None:
    print(f"[claim_backlog {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- a fresh store and its backlog -------------------------------------------------------------


@contextlib.contextmanager
def fresh_store(backend: str, pg_url: str, folder: str, label: str) -> Iterator[str]:
    """The URL of a new, empty store (migrated on first open); removed afterwards."""
    if backend == "sqlite":
        path = os.path.join(folder, f"{label}.db")
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)
        return
    schema = f"{SCHEMA_PREFIX}_{os.getpid()}_{label}"
    drop_schema(pg_url, schema)
    joiner = "&" if "?" in pg_url else "?"
    try:
        yield f"{pg_url}{joiner}schema={schema}"
    finally:
        drop_schema(pg_url, schema)


def drop_schema(pg_url: str, schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def template(store: SqliteStore | PostgresStore) -> InstanceId:
    """One instance started by the store's own start path: the row every other one copies."""
    new = NewInstance(
        instance_id=InstanceId("bk-0000000"),
        tenant=TenantId("default"),
        workflow_name=SERVED.workflow_name,
        workflow_version=SERVED.workflow_version,
        fingerprint=SERVED.fingerprint,
        business_key=BusinessKey("bk-0000000"),
        input="0",
    )
    record, created = store.start_instance(new, now=time.time())
    assert created
    return record.instance_id


def clone_sql(backend: str, columns: list[str]) -> str:
    """INSERT ... SELECT copying the template row for ids :low..:high-1 (named parameters)."""
    if backend == "postgres":
        series = "generate_series(%(low)s, %(high)s - 1) AS s(i)"
        ident = "'bk-' || lpad(s.i::text, 7, '0')"
        due = f"t.available_at - random() * {SPREAD_SECONDS}"
        template_id = "%(template)s"
    else:
        series = (
            "(WITH RECURSIVE n(i) AS (SELECT :low UNION ALL"
            " SELECT i + 1 FROM n WHERE i + 1 < :high) SELECT i FROM n) AS s"
        )
        ident = "'bk-' || printf('%07d', s.i)"
        due = f"t.available_at - (abs(random()) % 1000000) / 1000000.0 * {SPREAD_SECONDS}"
        template_id = ":template"
    replaced = {"instance_id": ident, "business_key": ident, "available_at": due}
    select = ", ".join(replaced.get(c, f"t.{c}") for c in columns)
    return (
        f"INSERT INTO lf_instances ({', '.join(columns)}) SELECT {select} "
        f"FROM lf_instances t, {series} WHERE t.instance_id = {template_id}"
    )


class Raw:
    """A plain connection to the store's tables, beside the store: the bulk fill, the plans."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.lite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self.lite.row_factory = sqlite3.Row
        else:
            # Connected as the store connects (its search_path, its session settings).
            rest, own = split_query(url, POSTGRES_OPTIONS)
            self.pg = psycopg.connect(postgres_target(rest, own).conninfo, autocommit=True)

    def close(self) -> None:
        if self.backend == "sqlite":
            self.lite.close()
        else:
            self.pg.close()

    def columns(self) -> list[str]:
        if self.backend == "sqlite":
            return [r["name"] for r in self.lite.execute("PRAGMA table_info(lf_instances)")]
        rows = self.pg.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = "
            "'lf_instances' AND table_schema = current_schema() ORDER BY ordinal_position"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def fill(self, template_id: str, n: int) -> float:
        """Clone the template into n-1 more rows; returns the seconds it took."""
        statement = clone_sql(self.backend, self.columns())
        t0 = time.perf_counter()
        for low in range(1, n, FILL_CHUNK):
            params = {"low": low, "high": min(n, low + FILL_CHUNK), "template": template_id}
            if self.backend == "sqlite":
                self.lite.execute("BEGIN IMMEDIATE")
                self.lite.execute(statement, params)
                self.lite.execute("COMMIT")
            else:
                self.pg.execute(statement, params)
            say(f"  filled {params['high']:,} of {n:,}")
        if self.backend == "sqlite":
            self.lite.execute("ANALYZE")
        else:
            self.pg.execute("VACUUM ANALYZE lf_instances")
        return time.perf_counter() - t0

    def drop_claim_index(self) -> None:
        statement = f"DROP INDEX IF EXISTS {CLAIM_INDEX}"  # main before 0024 has none
        if self.backend == "sqlite":
            self.lite.execute(statement)
        else:
            self.pg.execute(statement)

    def count_runnable(self) -> int:
        query = "SELECT count(*) FROM lf_instances WHERE status = 'RUNNING'"
        if self.backend == "sqlite":
            return int(self.lite.execute(query).fetchone()[0])
        row = self.pg.execute(query).fetchone()
        assert row is not None
        return int(row[0])

    def give_effects(self, owner: str) -> int:
        """An INTENDED effect with a heartbeat not yet due for each instance ``owner`` holds
        (through the store's own tables: a copy of an effect row written for the first)."""
        statement = (
            "INSERT INTO lf_effects (effect_id, instance_id, run, seq, participant, operation, "
            "classification, idempotency_key, state, attempt, payload, generation, updated_at, "
            "heartbeat_due_at, heartbeat_attempt, heartbeat_generation) "
            "SELECT 'e-' || instance_id, instance_id, run, 1, 'desk', 'record', "
            "'forward-recovery-only', 'k-' || instance_id, 'INTENDED', 1, '{}', generation, "
            "updated_at, updated_at + 3600, 1, generation FROM lf_instances WHERE owner = "
        )
        if self.backend == "sqlite":
            return int(self.lite.execute(statement + ":owner", {"owner": owner}).rowcount)
        return int(self.pg.execute(statement + "%(owner)s", {"owner": owner}).rowcount)

    def plan(self, query: str, params: dict[str, Any]) -> dict[str, Any]:
        """The claim query's plan: SQLite's EXPLAIN QUERY PLAN; PostgreSQL's EXPLAIN (ANALYZE,
        BUFFERS) of the custom and of the generic plan, in a transaction rolled back (the query
        locks what it selects)."""
        if self.backend == "sqlite":
            rows = self.lite.execute("EXPLAIN QUERY PLAN " + query, params).fetchall()
            return {"query_plan": [f"{r['id']}:{r['parent']} {r['detail']}" for r in rows]}
        found: dict[str, Any] = {}
        for mode in ("force_custom_plan", "force_generic_plan"):
            with self.pg.transaction(force_rollback=True):
                self.pg.execute(sql.SQL("SET LOCAL plan_cache_mode = {}").format(sql.SQL(mode)))
                # With costs: EXPLAIN prints its JIT summary only then.
                explain = "EXPLAIN (ANALYZE, BUFFERS) " + query
                rows = self.pg.execute(explain, params).fetchall()
            found[mode.removeprefix("force_")] = [str(r[0]) for r in rows]
        return found


# -- the measurement ---------------------------------------------------------------------------


def claim_kwargs(backend: str, owner: WorkerId, limit: int) -> dict[str, Any]:
    return {
        "owner": owner,
        # PostgreSQL decides leases by the database's clock, as a worker there does.
        "now": None if backend == "postgres" else time.time(),
        "lease_seconds": LEASE_SECONDS,
        "limit": limit,
        "serves": [SERVED],
    }


def claim_and_park(backend: str, store: SqliteStore | PostgresStore, claims: int) -> dict[str, Any]:
    """Claim ``claims`` instances batch after batch, parking each batch: the two rates."""
    claim_seconds: list[float] = []
    park_seconds: list[float] = []
    taken = 0
    while taken < claims:
        limit = min(limits.CLAIM_BATCH_MAX, claims - taken)
        t0 = time.perf_counter()
        records = store.claim(**claim_kwargs(backend, OWNER, limit))
        t1 = time.perf_counter()
        if not records:
            raise RuntimeError(f"the backlog ran dry after {taken} claims")
        now = time.time()
        parks = [
            Commit(
                instance_id=r.instance_id,
                owner=OWNER,
                generation=r.generation,
                writes=(Release(available_at=now + PARK_SECONDS),),
            )
            for r in records
        ]
        refused = [e for e in store.commit(parks, now=now) if e is not None]
        t2 = time.perf_counter()
        if refused:
            raise RuntimeError(f"a park was refused: {refused[0]}")
        claim_seconds.append(t1 - t0)
        park_seconds.append(t2 - t1)
        taken += len(records)
    claiming = sum(claim_seconds)
    both = claiming + sum(park_seconds)
    ms = sorted(s * 1000 for s in claim_seconds)
    return {
        "claimed": taken,
        "batches": len(claim_seconds),
        "claims_per_s": round(taken / claiming, 1),
        "claim_park_per_s": round(taken / both, 1),
        "claim_batch_ms": {
            "p50": round(statistics.median(ms), 3),
            "p99": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3),
        },
    }


def claim_query(backend: str, store: SqliteStore | PostgresStore) -> tuple[str, dict[str, Any]]:
    """The store's own select_claimable and the parameters the claim sends it."""
    kwargs = claim_kwargs(backend, OWNER, limits.CLAIM_BATCH_MAX)
    params = {
        "owner": OWNER,
        "now": kwargs["now"],
        "limit": kwargs["limit"],
        "running": "[]",
        "serves": served_json([SERVED]),
        "retaking": "[]",
    }
    return store._q["select_claimable"], params  # the very query the claim runs


@dataclass
class Backlog:
    """One size's store, filled, and what was measured on it."""

    n: int
    store: SqliteStore | PostgresStore
    raw: Raw
    figures: dict[str, Any] = field(default_factory=dict)
    rounds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def filled(args: argparse.Namespace, backend: str, n: int, url: str) -> Backlog:
    store = open_store(url)
    assert isinstance(store, SqliteStore | PostgresStore)
    raw = Raw(backend, url)
    if args.without_claim_index:
        raw.drop_claim_index()
    say(f"{backend} n={n:,}: filling")
    fill_seconds = raw.fill(template(store), n)
    runnable = raw.count_runnable()
    if runnable != n:
        raise RuntimeError(f"{runnable} runnable instances, not {n}")
    backlog = Backlog(n=n, store=store, raw=raw)
    backlog.figures = {"instances": n, "fill_seconds": round(fill_seconds, 1)}
    return backlog


def hold_in_flight(args: argparse.Namespace, backend: str, backlog: Backlog) -> dict[str, Any]:
    """Another worker's instances in flight, each with an effect under a heartbeat."""
    held = 0
    while held < args.in_flight:
        want = min(limits.CLAIM_BATCH_MAX, args.in_flight - held)
        held += len(backlog.store.claim(**claim_kwargs(backend, OTHER, want)))
    effects = backlog.raw.give_effects(OTHER)
    if backend == "postgres":
        backlog.raw.pg.execute("ANALYZE lf_effects")
    return {"held_by_another_worker": held, "intended_effects": effects}


def measure(args: argparse.Namespace, backend: str, backlogs: list[Backlog], kind: str) -> None:
    """``--claims`` per size in ``--rounds`` rounds, the sizes taking turns (the order flips
    each round): a machine whose load drifts weighs on every size alike. The median round."""
    for backlog in backlogs:
        query, params = claim_query(backend, backlog.store)
        backlog.figures.setdefault(kind, {})["plan"] = backlog.raw.plan(query, params)
        backlog.rounds[kind] = []
    per_round = args.claims // args.rounds
    for k in range(args.rounds):
        for backlog in backlogs if k % 2 == 0 else list(reversed(backlogs)):
            backlog.rounds[kind].append(claim_and_park(backend, backlog.store, per_round))
    for backlog in backlogs:
        rounds = backlog.rounds[kind]
        out = backlog.figures[kind]
        out["claimed"] = sum(r["claimed"] for r in rounds)
        for rate in ("claims_per_s", "claim_park_per_s"):
            out[rate] = round(statistics.median(r[rate] for r in rounds), 1)
            out[f"{rate}_each_round"] = [r[rate] for r in rounds]
        out["claim_batch_ms_p50"] = round(
            statistics.median(r["claim_batch_ms"]["p50"] for r in rounds), 3
        )
        say(f"{backend} n={backlog.n:,} {kind}: {out['claims_per_s']} claims/s")


def one_backend(args: argparse.Namespace, backend: str, folder: str) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        backlogs: list[Backlog] = []
        for n in args.sizes:
            url = stack.enter_context(fresh_store(backend, args.pg_url, folder, f"{backend}_{n}"))
            backlog = filled(args, backend, n, url)
            stack.callback(backlog.store.close)
            stack.callback(backlog.raw.close)
            backlogs.append(backlog)
        measure(args, backend, backlogs, "idle")
        for backlog in backlogs:
            backlog.figures["in_flight"] = hold_in_flight(args, backend, backlog)
        measure(args, backend, backlogs, "in_flight")
        small, large = backlogs[0], backlogs[-1]
        ratio = {
            kind: {
                rate: round(large.figures[kind][rate] / small.figures[kind][rate], 3)
                for rate in ("claims_per_s", "claim_park_per_s")
            }
            for kind in ("idle", "in_flight")
        }
        return {
            "sizes": {str(b.n): b.figures for b in backlogs},
            f"rate_at_{large.n}_over_{small.n}": ratio,
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ledgerflow-backlog-") as folder:
        for backend in args.backends:
            result[backend] = one_backend(args, backend, folder)
    result["settings"] = {
        "quick": args.quick,
        "claims_per_measure": args.claims,
        "rounds": args.rounds,
        "claim_batch": limits.CLAIM_BATCH_MAX,
        "in_flight": args.in_flight,
        "claim_index": "dropped" if args.without_claim_index else CLAIM_INDEX,
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1,000 and 20,000 instances")
    p.add_argument("--sizes", type=int, nargs="+", help="backlog sizes (default 10,000 1,000,000)")
    p.add_argument("--claims", type=int, help="instances claimed per measurement")
    p.add_argument("--in-flight", type=int, help="another worker's instances left owned")
    p.add_argument("--rounds", type=int, default=5, help="rounds the sizes take turns in")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--postgres-url", help="default: $LEDGERFLOW_BENCH_POSTGRES_URL, ...")
    p.add_argument(
        "--without-claim-index", action="store_true", help=f"drop {CLAIM_INDEX} (the 'before')"
    )
    args = p.parse_args(argv)
    preset = QUICK if args.quick else FULL
    args.sizes = sorted(args.sizes or preset["sizes"])
    args.claims = args.claims or preset["claims"]
    args.in_flight = preset["in_flight"] if args.in_flight is None else args.in_flight
    # Each size is measured twice (idle, then past the instances in flight): it must not run dry.
    if len(args.sizes) < 2 or min(args.sizes) <= 2 * args.claims + args.in_flight:
        p.error("give two sizes or more, each above twice --claims plus --in-flight")
    args.pg_url = (
        args.postgres_url
        or os.environ.get("LEDGERFLOW_BENCH_POSTGRES_URL")
        or os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL")
        or PG_URL_DEFAULT
    )
    return args


def main(argv: list[str] | None = None) -> int:
    print(json.dumps(run(parse(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
