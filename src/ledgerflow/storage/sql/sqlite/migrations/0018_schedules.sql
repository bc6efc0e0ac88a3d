-- Ledgerflow schema 0018: schedules and their slots.
--
-- A schedule's row is its spec in force (and that spec's version), its cursor (the nominal
-- instant of the next slot not decided yet), whether an operator paused or deleted it, the
-- slot it holds buffered and the instance it fired last. A tick moves the cursor with a
-- conditional update (WHERE cursor = the one it planned against) in the transaction that
-- records its slots and starts their instances: no leader, and no slot decided twice.
CREATE TABLE lf_schedules (
    name             TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    spec             TEXT NOT NULL,
    spec_version     INTEGER NOT NULL,
    cursor           REAL NOT NULL,
    paused           INTEGER NOT NULL DEFAULT 0,
    buffered_at      REAL,
    buffered_version INTEGER,
    last_instance_id TEXT,
    deleted          INTEGER NOT NULL DEFAULT 0,
    updated_at       REAL NOT NULL
);

-- Every spec a schedule has had, from when it was in force: a backfill decides each slot by
-- the spec in force at its nominal instant.
CREATE TABLE lf_schedule_specs (
    name          TEXT NOT NULL,
    spec_version  INTEGER NOT NULL,
    spec          TEXT NOT NULL,
    in_force_from REAL NOT NULL,
    PRIMARY KEY (name, spec_version)
);

-- One row per decided slot, its identity (schedule, spec version, nominal instant): the
-- instance it fired, or why it did not fire. The key makes a second decision of a slot an
-- error, whichever path (tick, backfill) tries it.
CREATE TABLE lf_schedule_slots (
    name         TEXT NOT NULL,
    nominal_at   REAL NOT NULL,
    spec_version INTEGER NOT NULL,
    outcome      TEXT NOT NULL CHECK (outcome IN ('FIRED', 'SKIPPED', 'MISSED', 'BUFFERED')),
    reason       TEXT NOT NULL,
    instance_id  TEXT,
    decided_at   REAL NOT NULL,
    lateness     REAL NOT NULL,
    PRIMARY KEY (name, nominal_at)
);
