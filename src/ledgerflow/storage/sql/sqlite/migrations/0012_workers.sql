-- Ledgerflow schema 0012: the worker registry, so that work is routed by capability and due
-- work no live worker can run is seen.

-- A worker process while it runs: where it runs, how many instances it drives at once (slots),
-- and its last heartbeat. "Live" is a heartbeat within a bound; a clean shutdown sets
-- stopped_at. Rows of workers stopped or silent for longer than the retention bound are pruned
-- when another worker registers.
CREATE TABLE lf_workers (
    worker_id    TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    slots        INTEGER NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopped_at   REAL
);

CREATE INDEX lf_workers_heartbeat ON lf_workers (heartbeat_at);

-- The definitions a worker serves: it claims only instances pinned to one of them.
CREATE TABLE lf_worker_definitions (
    worker_id        TEXT NOT NULL,
    workflow_name    TEXT NOT NULL,
    workflow_version INTEGER NOT NULL,
    fingerprint      TEXT NOT NULL,
    PRIMARY KEY (worker_id, workflow_name, workflow_version, fingerprint)
);

CREATE INDEX lf_worker_definitions_served
    ON lf_worker_definitions (workflow_name, workflow_version, fingerprint);
