-- Definition versions: what is in flight on each, and which are retired. "In flight" is every
-- status an instance can still move from, parked ones included (an operator may resume them).

-- name: select_retired_versions
SELECT * FROM lf_retired_versions ORDER BY workflow_name, workflow_version;

-- name: insert_retired_version
INSERT INTO lf_retired_versions (
    workflow_name, workflow_version, retired_at, retired_by, reason, audit_id
) VALUES (:workflow_name, :workflow_version, :now, :retired_by, :reason, :audit_id);
