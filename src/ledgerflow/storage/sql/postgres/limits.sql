-- Concurrency limits: per workflow name and per tenant, enforced by the claim itself.

-- name: lock_limits
-- While any limit exists, claims take this lock so that two workers cannot both count the
-- same free slot; without limits no claim waits for another.
SELECT pg_advisory_xact_lock(1279677528) AS n FROM lf_limits LIMIT 1;
