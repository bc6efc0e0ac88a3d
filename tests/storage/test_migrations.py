"""The migrations produce the declared schema, and that schema is what the store's queries use.

The schema is declared below by hand (tables, columns, indexes, unique keys) so that a change to
a migration is a visible change here too. Every named query of the dialect must then prepare
(``EXPLAIN``) against a freshly migrated database, and the store must ask only for queries that
exist.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from ledger_records import started
from ledgerflow.model.ids import InstanceId
from ledgerflow.storage import migrations, open_store, queries

# The dialect of a journal URL's scheme (as the journal_url fixture writes them).
DIALECT = {"sqlite": "sqlite", "postgresql": "postgres"}

# table -> columns, in declaration order.
DECLARED_TABLES: dict[str, list[str]] = {
    "lf_instances": [
        "instance_id",
        "tenant",
        "workflow_name",
        "workflow_version",
        "fingerprint",
        "business_key",
        "run",
        "status",
        "owner",
        "generation",
        "lease_expires_at",
        "available_at",
        "input",
        "result",
        "reason_code",
        "reason",
        "created_at",
        "updated_at",
        "cancel_requested_at",
        "cancel_reason",
        "cancel_compensate",
        "lease_expiries",
        "cause",
        "cancel_outcome",
        "trace_context",
        "arrived_since_claim",
        "run_input",
        "parent_instance_id",
        "parent_run",
        "parent_seq",
        "on_parent_end",
        "first_run",
    ],
    "lf_steps": [
        "instance_id",
        "run",
        "seq",
        "kind",
        "name",
        "command_id",
        "status",
        "attempt",
        "input",
        "output",
        "error",
        "retry_policy",
        "next_attempt_at",
        "generation",
        "updated_at",
        "attempt_errors",
        "error_traceback",
    ],
    "lf_effects": [
        "effect_id",
        "instance_id",
        "run",
        "seq",
        "participant",
        "operation",
        "classification",
        "idempotency_key",
        "state",
        "attempt",
        "doubt",
        "payload",
        "evidence",
        "reason",
        "generation",
        "updated_at",
        "compensates",
        "reconciled_at",
        "attempt_errors",
        "lookup_failures",
        "contract_version",
        "heartbeat_at",
        "heartbeat_due_at",
        "heartbeat_attempt",
        "heartbeat_generation",
        "heartbeat_details",
    ],
    "lf_timeline": [
        "entry_id",
        "instance_id",
        "at",
        "generation",
        "subject",
        "from_state",
        "to_state",
        "detail",
    ],
    "lf_inbox": [
        "instance_id",
        "event_id",
        "name",
        "payload",
        "sender",
        "for_seq",
        "received_at",
        "state",
        "refusal",
        "reason",
        "consumed_seq",
        "consumed_generation",
        "run",
    ],
    # Effect limits (scope 'effect:...') add a GCRA and a key (0022).
    # ... and fairness, and the declaration in code last applied (0023).
    "lf_limits": [
        "scope",
        "in_flight_max",
        "rate_per_second",
        "burst",
        "per",
        "fair_by",
        "weights",
        "declared",
    ],
    "lf_audit": [
        "audit_id",
        "at",
        "actor",
        "role",
        "kind",
        "instance_id",
        "target",
        "fingerprint",
        "outcome",
        "reason",
        "evidence",
        "plan",
        "refusal",
        "generation_before",
        "generation_after",
    ],
    "lf_attention": [
        "flag_id",
        "instance_id",
        "reason_code",
        "evidence",
        "detected_at",
        "detected_by",
        "cleared_at",
        "cleared_by",
        "cleared_reason",
    ],
    "lf_reconciliations": [
        "run_id",
        "actor",
        "started_at",
        "finished_at",
        "compared",
        "matched",
        "corrected",
        "escalated",
        "unreachable",
        "details",
    ],
    "lf_api_tokens": [
        "token_id",
        "name",
        "role",
        "tenant",
        "secret_hash",
        "created_at",
        "created_by",
        "revoked_at",
        "revoked_by",
    ],
    "lf_idempotency": [
        "scope",
        "idempotency_key",
        "request_hash",
        "status",
        "body",
        "created_at",
    ],
    "lf_console_sessions": [
        "session_hash",
        "token_id",
        "csrf_token",
        "created_at",
        "expires_at",
    ],
    "lf_retired_versions": [
        "workflow_name",
        "workflow_version",
        "retired_at",
        "retired_by",
        "reason",
        "audit_id",
    ],
    "lf_workers": [
        "worker_id",
        "host",
        "pid",
        "started_at",
        "slots",
        "heartbeat_at",
        "stopped_at",
    ],
    "lf_worker_definitions": ["worker_id", "workflow_name", "workflow_version", "fingerprint"],
    "lf_inbox_refusals": [
        "instance_id",
        "refused",
        "first_at",
        "last_at",
        "last_event_id",
        "last_name",
        "last_sender",
    ],
    # The closed runs of instances that continued as new (0015).
    "lf_runs": ["instance_id", "run", "input", "steps", "generation", "closed_at", "ended"],
    # Schedules, every spec they had, and one row per decided slot (0018).
    "lf_schedules": [
        "name",
        "tenant",
        "spec",
        "spec_version",
        "cursor",
        "paused",
        "buffered_at",
        "buffered_version",
        "last_instance_id",
        "deleted",
        "updated_at",
    ],
    "lf_schedule_specs": ["name", "spec_version", "spec", "in_force_from"],
    "lf_schedule_slots": [
        "name",
        "nominal_at",
        "spec_version",
        "outcome",
        "reason",
        "instance_id",
        "decided_at",
        "lateness",
    ],
    # Durable locks: the holder of each (name, tenant) and each lock's queue (0019).
    "lf_locks": [
        "name",
        "tenant",
        "holder_instance",
        "holder_run",
        "holder_seq",
        "granted_at",
    ],
    "lf_lock_waiters": [
        "position",
        "name",
        "tenant",
        "instance_id",
        "run",
        "seq",
        "enqueued_at",
    ],
    # Values a workflow publishes, one row per instance and name (0021).
    "lf_values": ["instance_id", "name", "value", "version", "run", "seq", "published_at"],
    # Flow control on effects: each flow key's GCRA and each attempt's admission (0022).
    "lf_flow_keys": ["scope", "flow_key", "tat", "queue_tat", "vtime"],
    # Each fairness key's finish tag under one flow key (0023).
    "lf_flow_fair": ["scope", "flow_key", "fairness_key", "finish"],
    "lf_flow_admissions": [
        "effect_id",
        "attempt",
        "instance_id",
        "scope",
        "flow_key",
        "state",
        "reason",
        "slot",
        "throttled_since",
        "retry_at",
        "admitted_at",
        "throttled_seconds",
        "concurrency_max",
        "rate_per_second",
        "burst",
        # Priority and weighted fairness (0023).
        "priority",
        "fairness_key",
        "tag",
        "weight",
        "passed_over",
    ],
    # Written by the store itself, before any migration, to record which ones were applied.
    "lf_schema_migrations": ["version", "name", "checksum", "applied_at"],
}
# Named indexes: name -> (table, columns).
DECLARED_INDEXES: dict[str, tuple[str, list[str]]] = {
    "lf_instances_runnable": ("lf_instances", ["status", "available_at"]),
    # Runnable instances in the claim's order (0024, a partial index): no sort at any backlog.
    "lf_instances_claimable": ("lf_instances", ["available_at", "instance_id"]),
    "lf_effects_instance": ("lf_effects", ["instance_id", "run", "seq"]),
    "lf_effects_compensates": ("lf_effects", ["compensates"]),
    "lf_effects_heartbeat_due": ("lf_effects", ["heartbeat_due_at"]),
    "lf_inbox_pending": ("lf_inbox", ["instance_id", "name", "state", "received_at"]),
    "lf_inbox_received": ("lf_inbox", ["instance_id", "received_at", "event_id"]),
    "lf_timeline_instance": ("lf_timeline", ["instance_id", "entry_id"]),
    "lf_audit_instance": ("lf_audit", ["instance_id", "audit_id"]),
    "lf_audit_fingerprint": ("lf_audit", ["fingerprint", "audit_id"]),
    "lf_audit_at": ("lf_audit", ["at"]),
    "lf_attention_open": ("lf_attention", ["instance_id", "reason_code"]),
    "lf_attention_detected": ("lf_attention", ["detected_at"]),
    "lf_idempotency_created": ("lf_idempotency", ["created_at"]),
    "lf_instances_created": ("lf_instances", ["created_at", "instance_id"]),
    "lf_instances_parent": ("lf_instances", ["parent_instance_id"]),
    "lf_effects_unknown": ("lf_effects", ["updated_at"]),
    "lf_workers_heartbeat": ("lf_workers", ["heartbeat_at"]),
    "lf_locks_holder": ("lf_locks", ["holder_instance"]),
    "lf_lock_waiters_queue": ("lf_lock_waiters", ["name", "tenant", "position"]),
    "lf_flow_admissions_key": ("lf_flow_admissions", ["scope", "flow_key", "state"]),
    "lf_flow_admissions_instance": ("lf_flow_admissions", ["instance_id"]),
    "lf_worker_definitions_served": (
        "lf_worker_definitions",
        ["workflow_name", "workflow_version", "fingerprint"],
    ),
}
# Uniqueness the protocol depends on: table -> unique column sets (primary keys included).
DECLARED_UNIQUE: dict[str, set[tuple[str, ...]]] = {
    "lf_instances": {("instance_id",), ("tenant", "workflow_name", "business_key")},
    "lf_steps": {("instance_id", "run", "seq")},
    "lf_effects": {("effect_id",), ("idempotency_key",)},
    "lf_timeline": {("entry_id",)},
    "lf_inbox": {("instance_id", "event_id")},
    "lf_limits": {("scope",)},
    "lf_audit": {("audit_id",)},
    # At most one open flag per instance and reason (a partial index: cleared flags are kept).
    "lf_attention": {("flag_id",), ("instance_id", "reason_code")},
    "lf_reconciliations": {("run_id",)},
    "lf_api_tokens": {("token_id",)},
    # One stored answer per key and token.
    "lf_idempotency": {("scope", "idempotency_key")},
    "lf_console_sessions": {("session_hash",)},
    "lf_workers": {("worker_id",)},
    "lf_worker_definitions": {("worker_id", "workflow_name", "workflow_version", "fingerprint")},
    # One count of refused events per instance.
    "lf_inbox_refusals": {("instance_id",)},
    # A run closes once.
    "lf_runs": {("instance_id", "run")},
    # One schedule per name, one spec per version, and one decision per slot.
    "lf_schedules": {("name",)},
    "lf_schedule_specs": {("name", "spec_version")},
    "lf_schedule_slots": {("name", "nominal_at")},
    # One holder per lock; one queue place per acquiring position.
    "lf_locks": {("name", "tenant")},
    "lf_lock_waiters": {("position",), ("instance_id", "run", "seq")},
    # One value per instance and name.
    "lf_values": {("instance_id", "name")},
    "lf_schema_migrations": {("version",)},
}


@pytest.fixture
def migrated(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A database the store created and migrated from nothing, opened read-only by sqlite3."""
    path = tmp_path / "fresh.db"
    open_store(f"sqlite:///{path}").close()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    )
    return {r[0] for r in rows}


def test_migrations_create_exactly_the_declared_tables_and_columns(
    migrated: sqlite3.Connection,
) -> None:
    """Goal: the migrated schema is exactly the declared one: no missing, no extra columns.

    Method: compare the table list and each table's PRAGMA table_info column names, in order.
    """
    assert _tables(migrated) == set(DECLARED_TABLES)
    for table, columns in DECLARED_TABLES.items():
        found = [r[1] for r in migrated.execute(f"PRAGMA table_info({table})")]
        assert found == columns, table


def test_migrations_create_exactly_the_declared_indexes(migrated: sqlite3.Connection) -> None:
    """Goal: the indexes the claim, journal and timeline queries rely on exist, and no others.

    Method: list named (non-automatic) indexes with their table and columns.
    """
    rows = migrated.execute(
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall()
    found = {
        name: (table, [r[2] for r in migrated.execute(f"PRAGMA index_info({name})")])
        for name, table in rows
    }
    assert found == DECLARED_INDEXES


def test_migrations_declare_the_uniqueness_the_protocol_needs(
    migrated: sqlite3.Connection,
) -> None:
    """Goal: one instance per business key, one row per journal position, one effect per key.

    Method: collect every unique index (including primary keys and INTEGER PRIMARY KEY rowid
    aliases) per table and compare with the declared unique column sets.
    """
    for table, expected in DECLARED_UNIQUE.items():
        unique: set[tuple[str, ...]] = set()
        for _, name, is_unique, *_ in migrated.execute(f"PRAGMA index_list({table})"):
            if is_unique:
                unique.add(tuple(r[2] for r in migrated.execute(f"PRAGMA index_info({name})")))
        key = [r[1] for r in migrated.execute(f"PRAGMA table_info({table})") if r[5] > 0]
        if len(key) == 1:  # a one-column primary key may be the rowid itself, with no index
            unique.add((key[0],))
        assert unique == expected, table


def test_every_named_query_prepares_against_the_migrated_schema(
    migrated: sqlite3.Connection,
) -> None:
    """Goal: every query the store can run names only tables and columns that exist.

    Method: ``EXPLAIN`` each named query of ``queries.load("sqlite")`` (which compiles it
    without running it), binding every ``:name`` parameter to NULL.
    """
    named = queries.load("sqlite")
    assert named
    for name, sql in named.items():
        params = dict.fromkeys(re.findall(r"(?<!:):([a-z_]+)", sql))
        try:
            migrated.execute(f"EXPLAIN {sql}", params).fetchall()
        except sqlite3.Error as exc:
            pytest.fail(f"query {name} does not prepare: {exc}")


def test_the_store_runs_only_queries_that_exist_and_every_query_is_used() -> None:
    """Goal: no typo in a query name reaches run time, and no dead SQL accumulates.

    Method: collect the literal names passed to ``_run(...)`` and ``_send(...)`` in the storage
    package's source and compare with the named queries of the dialect.
    """
    package = resources.files("ledgerflow.storage")
    used: set[str] = set()
    for entry in package.iterdir():
        if entry.name.endswith(".py"):
            used |= set(re.findall(r"_(?:run|send)\(\s*\"([a-z_]+)\"", entry.read_text()))
    assert used
    assert used == set(queries.load("sqlite"))


def test_migrations_are_numbered_one_to_n_and_well_named() -> None:
    """Goal: migrations apply in a fixed order with no gaps, and no file is silently skipped.

    Method: every file in the migrations folder matches NNNN_name.sql and the numbers returned
    by ``queries.migrations`` are 1..n.
    """
    folder = resources.files("ledgerflow.storage").joinpath("sql", "sqlite", "migrations")
    names = sorted(entry.name for entry in folder.iterdir() if entry.is_file())
    assert names
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", n) for n in names), names
    found = queries.migrations("sqlite")
    assert [number for number, _, _ in found] == list(range(1, len(names) + 1))
    assert [f"{number:04d}_{name}.sql" for number, name, _ in found] == names


def test_migrations_apply_to_an_empty_database_on_their_own(tmp_path: Path) -> None:
    """Goal: the migration scripts alone (without the store) build the same tables.

    Method: run every migration with ``executescript`` on an empty database; the tables are the
    declared ones except the store's own migration record.
    """
    conn = sqlite3.connect(tmp_path / "bare.db")
    try:
        for _, _, text in queries.migrations("sqlite"):
            conn.executescript(text)
        assert _tables(conn) == set(DECLARED_TABLES) - {"lf_schema_migrations"}
    finally:
        conn.close()


def _raw(url: str, *statements: str) -> list[tuple[object, ...]]:
    """Run statements on the journal behind the store's back (as an older Ledgerflow wrote it);
    return the last statement's rows."""
    rows: list[tuple[object, ...]] = []
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            with conn:
                for statement in statements:
                    rows = conn.execute(statement).fetchall()
        finally:
            conn.close()
        return rows
    import psycopg

    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f"SET search_path TO {schema}")
        for statement in statements:
            cursor = pg.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
    return rows


def test_the_timeline_migration_keeps_every_entry_and_its_number(
    journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goal: migration 0008 renames lf_events to lf_timeline (event_id to entry_id) on a journal
    that already holds a timeline, keeping every entry, its number and its order, and numbering
    new entries after them.

    Method: build the journal as Ledgerflow stood before 0008 (the newest migration held back),
    write an instance and three timeline rows with raw SQL under the old names; open the store
    (it applies 0008); its timeline is those rows, in order, with their numbers; a new start
    adds an entry numbered higher than all of them.
    """
    before = [m for m in migrations.known(DIALECT[journal_url.split(":")[0]]) if m.number < 8]
    monkeypatch.setattr(migrations, "known", lambda dialect: before)
    open_store(journal_url).close()
    monkeypatch.undo()
    _raw(
        journal_url,
        "INSERT INTO lf_instances (instance_id, tenant, workflow_name, workflow_version, "
        "fingerprint, business_key, run, status, generation, available_at, input, created_at, "
        "updated_at) VALUES ('wf-old', 'acme', 'order', 1, 'fp', 'old', 1, 'RUNNING', 0, 0, "
        "'{}', 0, 0)",
        *(
            "INSERT INTO lf_events (instance_id, at, generation, subject, from_state, to_state, "
            f"detail) VALUES ('wf-old', {at}, 0, 'instance', NULL, 'RUNNING', 'line {at}')"
            for at in (1, 2, 3)
        ),
    )
    numbers = [row[0] for row in _raw(journal_url, "SELECT event_id FROM lf_events ORDER BY 1")]
    store = open_store(journal_url)
    try:
        kept = store.timeline(InstanceId("wf-old"))
        assert [(e.entry_id, e.detail) for e in kept] == [
            (n, f"line {at}") for n, at in zip(numbers, (1, 2, 3), strict=True)
        ]
        [entry] = store.timeline(started(store, "new", now=4.0).instance_id)
        assert entry.entry_id > max(numbers)
    finally:
        store.close()
    assert _old_names(journal_url) == []


def _old_names(url: str) -> list[tuple[object, ...]]:
    """Whatever in the journal's schema is still named after lf_events."""
    if url.startswith("sqlite:///"):
        return _raw(
            url, "SELECT name FROM sqlite_master WHERE name LIKE 'lf\\_events%' ESCAPE '\\'"
        )
    return _raw(
        url,
        "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
        "AND relname LIKE 'lf\\_events%' UNION ALL SELECT conname FROM pg_constraint "
        "WHERE connamespace = current_schema()::regnamespace AND conname LIKE 'lf\\_events%'",
    )
