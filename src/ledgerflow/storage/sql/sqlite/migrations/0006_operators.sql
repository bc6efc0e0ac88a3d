-- Ledgerflow schema 0006: what operators need — the audit log of repairs, the attention flags
-- raised by detection and reconciliation, the record of each reconciliation run, and the two
-- counters detection and reconciliation read.

-- Append-only: one row per repair applied, repeated (no-op) or refused. Nothing updates or
-- deletes a row; a dry run writes nothing. fingerprint identifies "the same repair" (kind,
-- instance, target and arguments, not who asked) so that a repeat is recognised as one.
CREATE TABLE lf_audit (
    audit_id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at                REAL NOT NULL,
    actor             TEXT NOT NULL,
    role              TEXT,
    kind              TEXT NOT NULL,
    instance_id       TEXT,
    target            TEXT,
    fingerprint       TEXT NOT NULL,
    outcome           TEXT NOT NULL CHECK (outcome IN ('applied', 'no-op', 'refused')),
    reason            TEXT NOT NULL,
    evidence          TEXT,
    plan              TEXT NOT NULL,
    refusal           TEXT,
    generation_before INTEGER,
    generation_after  INTEGER
);

CREATE INDEX lf_audit_instance ON lf_audit (instance_id, audit_id);
CREATE INDEX lf_audit_fingerprint ON lf_audit (fingerprint, audit_id);
CREATE INDEX lf_audit_at ON lf_audit (at);

-- Something needs a person but the instance stays where it is (stuck, unresponsive
-- participant, a damaged row, a fact that drifted from the ledger). At most one open flag per
-- instance and reason; a cleared flag is kept with who cleared it and why.
CREATE TABLE lf_attention (
    flag_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id    TEXT NOT NULL,
    reason_code    TEXT NOT NULL,
    evidence       TEXT NOT NULL,
    detected_at    REAL NOT NULL,
    detected_by    TEXT NOT NULL,
    cleared_at     REAL,
    cleared_by     TEXT,
    cleared_reason TEXT
);

CREATE UNIQUE INDEX lf_attention_open ON lf_attention (instance_id, reason_code)
    WHERE cleared_at IS NULL;
CREATE INDEX lf_attention_detected ON lf_attention (detected_at);

-- One row per reconciliation run: what it compared, what differed, what it corrected and what
-- it handed to a person; details holds one line per difference.
CREATE TABLE lf_reconciliations (
    run_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    actor       TEXT NOT NULL,
    started_at  REAL NOT NULL,
    finished_at REAL,
    compared    INTEGER NOT NULL DEFAULT 0,
    matched     INTEGER NOT NULL DEFAULT 0,
    corrected   INTEGER NOT NULL DEFAULT 0,
    escalated   INTEGER NOT NULL DEFAULT 0,
    unreachable INTEGER NOT NULL DEFAULT 0,
    details     TEXT NOT NULL DEFAULT '[]'
);

-- How many times in a row a lease ran out on this instance without it making progress: the
-- crash-loop (poison) detector parks it past a bound. Reset by any commit of its owner.
ALTER TABLE lf_instances ADD COLUMN lease_expiries INTEGER NOT NULL DEFAULT 0;

-- When reconciliation last compared this effect with its participant's facts: runs take the
-- least recently compared first, so a bounded run still reaches every effect in turn.
ALTER TABLE lf_effects ADD COLUMN reconciled_at REAL;
