-- Reconciliation: which effects a run compares with their participants' own facts, when each
-- was last compared, and the record of each run (what it compared, what differed, what it
-- corrected and what it handed to a person).

-- name: select_reconcile_candidates
-- Settled effects (CONFIRMED, FAILED), where drift hides, and effects in doubt (UNKNOWN) of
-- parked instances: a live instance's worker settles its own doubt, and a reconciler racing it
-- would only be refused. Only participants that have a lookup (:participants, a JSON array),
-- least recently compared first; never compared sorts first (NULL is lowest in SQLite), and
-- the effect id breaks ties so that consecutive bounded runs walk the whole ledger.
SELECT e.* FROM lf_effects e
JOIN lf_instances i ON i.instance_id = e.instance_id
WHERE e.participant IN (SELECT value FROM json_each(:participants))
  AND (e.state IN ('CONFIRMED', 'FAILED')
       OR (e.state = 'UNKNOWN' AND i.status = 'MANUAL_INTERVENTION'))
ORDER BY e.reconciled_at, e.effect_id
LIMIT :limit;

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
