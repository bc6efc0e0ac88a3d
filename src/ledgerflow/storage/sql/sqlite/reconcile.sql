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
