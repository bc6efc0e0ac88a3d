-- Definition versions: what is in flight on each, and which are retired. "In flight" is every
-- status an instance can still move from, parked ones included (an operator may resume them).

-- name: oldest_in_flight
-- Per workflow, version and fingerprint: the oldest instance that has not ended for good (of
-- one tenant, or of all).
SELECT DISTINCT ON (workflow_name, workflow_version, fingerprint)
       workflow_name, workflow_version, fingerprint, instance_id, status, created_at
FROM lf_instances
WHERE status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
ORDER BY workflow_name, workflow_version, fingerprint, created_at, instance_id;

-- name: lock_instances_for_retirement
-- Waits for every transaction that is writing instances (a start among them) and holds new
-- ones back until the retirement commits: its count and a racing start cannot both win.
LOCK TABLE lf_instances IN SHARE MODE;

-- name: count_version_statuses
-- Instances of one workflow version (every fingerprint, every tenant) per status.
SELECT status, count(*) AS instances FROM lf_instances
WHERE workflow_name = :workflow_name AND workflow_version = CAST(:workflow_version AS bigint)
GROUP BY status ORDER BY status;

-- name: oldest_in_flight_of_version
SELECT instance_id, status, created_at FROM lf_instances
WHERE workflow_name = :workflow_name AND workflow_version = CAST(:workflow_version AS bigint)
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')
ORDER BY created_at, instance_id LIMIT 1;

-- name: last_ended_of_version
-- The instance of one workflow version that ended for good most recently.
SELECT instance_id, status, updated_at FROM lf_instances
WHERE workflow_name = :workflow_name AND workflow_version = CAST(:workflow_version AS bigint)
  AND status IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')
ORDER BY updated_at DESC, instance_id LIMIT 1;

-- name: select_retired_version
SELECT * FROM lf_retired_versions
WHERE workflow_name = :workflow_name AND workflow_version = CAST(:workflow_version AS bigint);
