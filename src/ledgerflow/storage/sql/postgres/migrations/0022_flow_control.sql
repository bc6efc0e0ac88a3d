-- Ledgerflow schema 0022: flow control on effects (issue 27).
--
-- An effect limit is a row of lf_limits whose scope is 'effect:<participant>.<operation>':
-- in_flight_max bounds the effects of one flow key dispatched and not yet settled (a very
-- large value: no concurrency bound), rate_per_second and burst its GCRA, per what keys it
-- ('tenant', 'input.<path>', NULL: one key). Instance scopes leave the new columns NULL.
ALTER TABLE lf_limits ADD COLUMN rate_per_second DOUBLE PRECISION;
ALTER TABLE lf_limits ADD COLUMN burst BIGINT;
ALTER TABLE lf_limits ADD COLUMN per TEXT;

-- Each flow key's GCRA: the theoretical arrival time of admissions (tat) and the next slot a
-- throttled effect may reserve (queue_tat). Its row is locked by each admission, so two
-- workers' admissions of one key are decided one after the other.
CREATE TABLE lf_flow_keys (
    scope     TEXT NOT NULL,
    flow_key  TEXT NOT NULL,
    tat       DOUBLE PRECISION NOT NULL,
    queue_tat DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, flow_key)
);

-- Each attempt of a limited effect: THROTTLED (waiting, never sent: its timeout has not
-- started), ADMITTED (dispatched at admitted_at, outcome not yet recorded) or SETTLED (its
-- outcome recorded since). The limits it was admitted under are kept with it.
CREATE TABLE lf_flow_admissions (
    effect_id         TEXT NOT NULL,
    attempt           BIGINT NOT NULL,
    instance_id       TEXT NOT NULL REFERENCES lf_instances (instance_id),
    scope             TEXT NOT NULL,
    flow_key          TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('THROTTLED', 'ADMITTED', 'SETTLED')),
    reason            TEXT,
    slot              DOUBLE PRECISION,
    throttled_since   DOUBLE PRECISION,
    retry_at          DOUBLE PRECISION,
    admitted_at       DOUBLE PRECISION,
    throttled_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    concurrency_max   BIGINT,
    rate_per_second   DOUBLE PRECISION,
    burst             BIGINT,
    PRIMARY KEY (effect_id, attempt)
);
CREATE INDEX lf_flow_admissions_key ON lf_flow_admissions (scope, flow_key, state);
CREATE INDEX lf_flow_admissions_instance ON lf_flow_admissions (instance_id);
