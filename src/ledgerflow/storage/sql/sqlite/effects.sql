-- Effects: the write-ahead intent and its outcome. The idempotency key is unique across the
-- whole ledger: one key, one effect, forever.

-- name: select_effects
-- The effects of many instances' runs, as select_steps.
SELECT * FROM lf_effects WHERE (instance_id, run) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys)
)
ORDER BY instance_id, run, seq;

-- name: heartbeat_effect
-- An in-flight attempt is alive (EffectHeartbeat): refused (no row) unless the effect is still
-- INTENDED at that attempt; the commit's owner fence checked the generation first. Its time is
-- :at, the clock leases are measured by. NULL details keep the last ones (the next attempt
-- reads them).
UPDATE lf_effects
SET heartbeat_at = :at, heartbeat_due_at = :at + :timeout_seconds,
    heartbeat_attempt = :attempt, heartbeat_generation = :generation,
    heartbeat_details = coalesce(:details, heartbeat_details)
WHERE effect_id = :effect_id AND attempt = :attempt AND state = 'INTENDED';
