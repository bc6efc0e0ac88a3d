-- Ledgerflow schema 0004: the inbox of signals, callbacks and approvals.
--
-- Every event delivered to an instance is kept, deduplicated by its id per instance: consumed by
-- the wait it answered, still pending (it arrived before its wait), or rejected with the reason
-- (the instance had ended, the step it named was closed, the sender may not approve).

CREATE TABLE lf_inbox (
    instance_id         TEXT NOT NULL REFERENCES lf_instances (instance_id),
    event_id            TEXT NOT NULL,
    name                TEXT NOT NULL,
    payload             TEXT NOT NULL,
    sender              TEXT,
    for_seq             BIGINT,
    received_at         DOUBLE PRECISION NOT NULL,
    state               TEXT NOT NULL,
    -- Why a REJECTED event was refused: ended, late or not-approver.
    refusal             TEXT,
    reason              TEXT,
    consumed_seq        BIGINT,
    consumed_generation BIGINT,
    PRIMARY KEY (instance_id, event_id)
);

CREATE INDEX lf_inbox_pending ON lf_inbox (instance_id, name, state, received_at);
