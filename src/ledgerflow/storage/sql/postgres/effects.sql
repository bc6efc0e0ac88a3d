-- Effects: the write-ahead intent and its outcome. The idempotency key is unique across the
-- whole ledger: one key, one effect, forever.

-- name: select_effects
-- The effects of many instances' runs, as select_steps.
SELECT * FROM lf_effects WHERE (instance_id, run) IN (
    SELECT k->>0, CAST(k->>1 AS bigint) FROM jsonb_array_elements(CAST(:keys AS jsonb)) AS k
)
ORDER BY instance_id, run, seq;
