-- Definition versions: what is in flight on each, and which are retired. "In flight" is every
-- status an instance can still move from, parked ones included (an operator may resume them).

-- name: oldest_in_flight
-- Per workflow, version and fingerprint: the oldest instance that has not ended for good (of
-- one tenant, or of all).
SELECT workflow_name, workflow_version, fingerprint, instance_id, status,
       min(created_at) AS created_at
FROM lf_instances
WHERE status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY workflow_name, workflow_version, fingerprint
ORDER BY workflow_name, workflow_version, fingerprint;

-- name: lock_instances_for_retirement
-- SQLite's write transaction already serialises a retirement with every start.
SELECT count(*) AS n FROM lf_retired_versions;

-- name: count_version_statuses
-- Instances of one workflow version (every fingerprint, every tenant) per status.
SELECT status, count(*) AS instances FROM lf_instances
WHERE workflow_name = :workflow_name AND workflow_version = :workflow_version
GROUP BY status ORDER BY status;

-- name: oldest_in_flight_of_version
SELECT instance_id, status, created_at FROM lf_instances
WHERE workflow_name = :workflow_name AND workflow_version = :workflow_version
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')
ORDER BY created_at, instance_id LIMIT 1;

-- name: last_ended_of_version
-- The instance of one workflow version that ended for good most recently.
SELECT instance_id, status, updated_at FROM lf_instances
WHERE workflow_name = :workflow_name AND workflow_version = :workflow_version
  AND status IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')
ORDER BY updated_at DESC, instance_id LIMIT 1;

-- name: select_retired_version
SELECT * FROM lf_retired_versions
WHERE workflow_name = :workflow_name AND workflow_version = :workflow_version;
