-- Concurrency limits: per workflow name and per tenant, enforced by the claim itself.

-- name: set_limit
INSERT INTO lf_limits (scope, in_flight_max) VALUES (:scope, :in_flight_max)
ON CONFLICT (scope) DO UPDATE SET in_flight_max = excluded.in_flight_max;

-- name: delete_limit
DELETE FROM lf_limits WHERE scope = :scope;

-- name: select_limits
SELECT scope, in_flight_max FROM lf_limits WHERE substr(scope, 1, 7) <> 'effect:' ORDER BY scope;
