-- Instances: start by business key, claim with a lease, fence every write on the generation.

-- name: get_instance
SELECT * FROM lf_instances WHERE instance_id = :instance_id;

-- name: find_instance
SELECT * FROM lf_instances
WHERE tenant = :tenant AND workflow_name = :workflow_name AND business_key = :business_key;

-- name: fence_instance
-- The first statement of every commit: proves the writer still owns this generation. A commit
-- is progress, so the run of lease expiries without progress starts over.
UPDATE lf_instances
SET updated_at = :now, lease_expiries = 0
WHERE instance_id = :instance_id AND owner = :owner AND generation = :generation;

-- name: select_cancel_request
-- Whether someone asked to cancel the instance: a new step is recorded only if not.
SELECT cancel_requested_at FROM lf_instances WHERE instance_id = :instance_id;

-- name: select_cancel_requests
-- Instances this owner drives that someone asked to cancel.
SELECT instance_id FROM lf_instances
WHERE owner = :owner AND cancel_requested_at IS NOT NULL
  AND status IN ('RUNNING', 'COMPENSATING', 'CANCELLING');

-- name: keep_trace_context
-- The trace context of the instance's first run span, inside a commit of its owner (fenced):
-- every later run continues that trace, so the first one kept is never replaced.
UPDATE lf_instances SET trace_context = :trace_context
WHERE instance_id = :instance_id AND trace_context IS NULL;

-- name: select_children
-- The children an instance started, oldest first (through the parent index), at most :limit.
SELECT * FROM lf_instances
WHERE parent_instance_id = :instance_id
ORDER BY created_at, instance_id
LIMIT :limit;
