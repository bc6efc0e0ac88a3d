-- Effects: the write-ahead intent and its outcome. The idempotency key is unique across the
-- whole ledger: one key, one effect, forever.

-- name: select_effects
-- The effects of many instances' runs, as select_steps.
SELECT * FROM lf_effects WHERE (instance_id, run) IN (
    SELECT k->>0, CAST(k->>1 AS bigint) FROM jsonb_array_elements(CAST(:keys AS jsonb)) AS k
)
ORDER BY instance_id, run, seq;

-- name: heartbeat_effect
-- An in-flight attempt is alive (EffectHeartbeat): refused (no row) unless the effect is still
-- INTENDED at that attempt; the commit's owner fence checked the generation first. Its time is
-- :at, or the database's clock when NULL (the clock leases are measured by, whatever the
-- worker's clock says). NULL details keep the last ones (the next attempt reads them).
UPDATE lf_effects
SET heartbeat_at = coalesce(CAST(:at AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)),
    heartbeat_due_at = coalesce(CAST(:at AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)) + :timeout_seconds,
    heartbeat_attempt = :attempt, heartbeat_generation = :generation,
    heartbeat_details = coalesce(CAST(:details AS text), heartbeat_details)
WHERE effect_id = :effect_id AND attempt = :attempt AND state = 'INTENDED';
