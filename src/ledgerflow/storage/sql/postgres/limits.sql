-- Concurrency limits: per workflow name and per tenant, enforced by the claim itself.

-- name: set_limit
INSERT INTO lf_limits (scope, in_flight_max) VALUES (:scope, :in_flight_max)
ON CONFLICT (scope) DO UPDATE SET in_flight_max = excluded.in_flight_max;

-- name: delete_limit
DELETE FROM lf_limits WHERE scope = :scope;

-- name: select_limits
SELECT scope, in_flight_max FROM lf_limits ORDER BY scope;

-- name: lock_limits
-- While any limit exists, claims take this lock so that two workers cannot both count the
-- same free slot; without limits no claim waits for another.
SELECT pg_advisory_xact_lock(1279677528) AS n FROM lf_limits LIMIT 1;
