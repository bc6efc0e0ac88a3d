-- Ledgerflow schema 0015: runs that follow one another (continue-as-new).
--
-- An instance's run N closes and run N+1 opens in one transaction (ctx.continue_as_new): the
-- instance row keeps the start's input (what its business key started, for a repeated start)
-- and carries the open run's own input beside it; each closed run leaves one row here, its
-- input and how many steps it journaled, so the history of a long chain stays readable while
-- a worker loads only the open run's journal.
ALTER TABLE lf_instances ADD COLUMN run_input TEXT;

CREATE TABLE lf_runs (
    instance_id TEXT NOT NULL REFERENCES lf_instances (instance_id),
    run         INTEGER NOT NULL,
    input       TEXT NOT NULL,
    steps       INTEGER NOT NULL,
    generation  INTEGER NOT NULL,
    closed_at   REAL NOT NULL,
    PRIMARY KEY (instance_id, run)
);

-- The run an event is filed under: the run open when it was kept, moved to the next run in
-- the switch's transaction while no wait has taken it. A wait takes only events of its own
-- run, so an event left on a closed run would be lost: the switch never leaves one there.
-- Deduplication stays the instance's (the inbox's key is still instance and event id).
ALTER TABLE lf_inbox ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
