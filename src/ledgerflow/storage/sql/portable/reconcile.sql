-- Reconciliation: which effects a run compares with their participants' own facts, when each
-- was last compared, and the record of each run (what it compared, what differed, what it
-- corrected and what it handed to a person).

-- name: mark_reconciled
-- Only the comparison time: state, evidence, generation and updated_at are the ledger's and
-- stay exactly as they were.
UPDATE lf_effects SET reconciled_at = :now WHERE effect_id = :effect_id;

-- name: insert_reconciliation
INSERT INTO lf_reconciliations (actor, started_at) VALUES (:actor, :now)
RETURNING run_id;

-- name: finish_reconciliation
-- A run is finished once: its counts and details are then the record, never rewritten.
UPDATE lf_reconciliations
SET finished_at = :now, compared = :compared, matched = :matched, corrected = :corrected,
    escalated = :escalated, unreachable = :unreachable, details = :details
WHERE run_id = :run_id AND finished_at IS NULL;

-- name: select_reconciliations
-- Newest first; a run that never finished (its process died) shows with finished_at NULL.
SELECT * FROM lf_reconciliations ORDER BY run_id DESC LIMIT :limit;
