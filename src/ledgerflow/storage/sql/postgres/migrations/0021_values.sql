-- Ledgerflow schema 0021: values a workflow publishes (ctx.publish) and update replies.
--
-- One row per (instance, name): the value last published, its version (1 for the first, one
-- more each time), and the run and position that published it. Written only in the owner's
-- fenced commit with that position, so a row never runs ahead of the journal. Values belong to
-- the instance: continue-as-new and the instance's end keep them.
CREATE TABLE lf_values (
    instance_id  TEXT NOT NULL REFERENCES lf_instances (instance_id),
    name         TEXT NOT NULL,
    value        TEXT NOT NULL,
    version      INTEGER NOT NULL,
    run          INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    published_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (instance_id, name)
);
