-- Concurrency limits: per workflow name and per tenant, enforced by the claim itself.

-- name: lock_limits
-- SQLite's write transaction already serialises claims; nothing more to hold.
SELECT count(*) AS n FROM lf_limits;
