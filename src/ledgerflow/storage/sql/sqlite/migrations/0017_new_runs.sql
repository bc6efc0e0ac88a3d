-- Ledgerflow schema 0017: a start that opens the next run of an ended instance (start options,
-- if_ended='new_run' / 'new_run_if_failed').
--
-- The ended run closes like a run that continued as new (its row in lf_runs), with how it
-- ended: a run that ended for good left no obligation to the runs after it (its effects were
-- confirmed as its outcome, compensated, or listed as a cancellation's residue), so the
-- instance remembers the first run of its open chain, and only runs from it on carry their
-- committed effects forward (continue-as-new).
ALTER TABLE lf_instances ADD COLUMN first_run INTEGER NOT NULL DEFAULT 1;
ALTER TABLE lf_runs ADD COLUMN ended TEXT;
