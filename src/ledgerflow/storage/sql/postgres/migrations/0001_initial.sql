-- Ledgerflow schema 0001: the instance, step, effect and event ledgers.
--
-- Times are seconds since the epoch (double precision). Leases are measured by the database
-- clock: time-dependent statements take :now only as a test override.

CREATE TABLE lf_instances (
    instance_id      TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    workflow_name    TEXT NOT NULL,
    workflow_version BIGINT NOT NULL,
    fingerprint      TEXT NOT NULL,
    business_key     TEXT NOT NULL,
    run              BIGINT NOT NULL DEFAULT 1,
    status           TEXT NOT NULL,
    owner            TEXT,
    generation       BIGINT NOT NULL DEFAULT 0,
    lease_expires_at DOUBLE PRECISION,
    available_at     DOUBLE PRECISION NOT NULL,
    input            TEXT NOT NULL,
    result           TEXT,
    reason_code      TEXT,
    reason           TEXT,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    UNIQUE (tenant, workflow_name, business_key)
);

CREATE INDEX lf_instances_runnable ON lf_instances (status, available_at);

CREATE TABLE lf_steps (
    instance_id     TEXT NOT NULL REFERENCES lf_instances (instance_id),
    run             BIGINT NOT NULL,
    seq             BIGINT NOT NULL,
    kind            TEXT NOT NULL,
    name            TEXT NOT NULL,
    command_id      TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    input           TEXT,
    output          TEXT,
    error           TEXT,
    retry_policy    TEXT NOT NULL,
    next_attempt_at DOUBLE PRECISION,
    generation      BIGINT NOT NULL,
    updated_at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (instance_id, run, seq)
);

CREATE TABLE lf_effects (
    effect_id       TEXT PRIMARY KEY,
    instance_id     TEXT NOT NULL REFERENCES lf_instances (instance_id),
    run             BIGINT NOT NULL,
    seq             BIGINT NOT NULL,
    participant     TEXT NOT NULL,
    operation       TEXT NOT NULL,
    classification  TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    state           TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    -- The highest attempt whose outcome is in doubt and no lookup has fenced (0: none). While
    -- it is set, a later attempt's rejection cannot prove the effect was never applied.
    doubt           BIGINT NOT NULL DEFAULT 0,
    payload         TEXT NOT NULL,
    evidence        TEXT,
    reason          TEXT,
    generation      BIGINT NOT NULL,
    updated_at      DOUBLE PRECISION NOT NULL
);

CREATE INDEX lf_effects_instance ON lf_effects (instance_id, run, seq);

CREATE TABLE lf_events (
    event_id    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id TEXT NOT NULL REFERENCES lf_instances (instance_id),
    at          DOUBLE PRECISION NOT NULL,
    generation  BIGINT NOT NULL,
    subject     TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    detail      TEXT
);

CREATE INDEX lf_events_instance ON lf_events (instance_id, event_id);
