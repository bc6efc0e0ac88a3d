-- Flow control on effects: what SQLite writes its own way.

-- name: lock_flow_key
-- SQLite's write transaction already holds the one write lock.
SELECT tat, queue_tat, vtime FROM lf_flow_keys WHERE scope = :scope AND flow_key = :flow_key;
