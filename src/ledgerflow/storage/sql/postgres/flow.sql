-- Flow control on effects: what PostgreSQL writes its own way.

-- name: lock_flow_key
-- The key's row, locked until the admission's transaction ends: two workers' admissions of one
-- key are decided one after the other, the second reading what the first committed.
SELECT tat, queue_tat, vtime FROM lf_flow_keys
WHERE scope = :scope AND flow_key = :flow_key
FOR UPDATE;
