-- Effects: the write-ahead intent and its outcome. The idempotency key is unique across the
-- whole ledger: one key, one effect, forever.

-- name: insert_effect
INSERT INTO lf_effects (
    effect_id, instance_id, run, seq, participant, operation, classification,
    idempotency_key, state, attempt, doubt, payload, evidence, reason, attempt_errors,
    lookup_failures, compensates, contract_version, generation, updated_at
) VALUES (
    :effect_id, :instance_id, :run, :seq, :participant, :operation, :classification,
    :idempotency_key, :state, :attempt, :doubt, :payload, :evidence, :reason, :attempt_errors,
    :lookup_failures, :compensates, :contract_version, :generation, :now
);

-- name: update_effect
-- The key, payload and identity never change after the intent; only state and evidence do.
UPDATE lf_effects
SET state = :state, attempt = :attempt, doubt = :doubt, evidence = :evidence, reason = :reason,
    attempt_errors = :attempt_errors, lookup_failures = :lookup_failures,
    generation = :generation, updated_at = :now
WHERE effect_id = :effect_id AND state = :expected AND idempotency_key = :idempotency_key;

-- name: select_all_effects
SELECT * FROM lf_effects WHERE instance_id = :instance_id ORDER BY run, seq;

-- name: count_confirmed_effects
-- Effects of the instance that are applied and stay applied: FAILED may not be claimed then.
SELECT count(*) AS n FROM lf_effects
WHERE instance_id = :instance_id AND state = 'CONFIRMED' AND compensates IS NULL;

-- name: find_effect_by_key
-- The effect a participant's callback names by its idempotency key.
SELECT * FROM lf_effects WHERE idempotency_key = :idempotency_key;
