-- Effects: the write-ahead intent and its outcome. The idempotency key is unique across the
-- whole ledger: one key, one effect, forever.

-- name: select_effects
-- The effects of many instances' runs, as select_steps.
SELECT * FROM lf_effects WHERE (instance_id, run) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys)
)
ORDER BY instance_id, run, seq;
