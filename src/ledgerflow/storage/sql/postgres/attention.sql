-- Attention: what detection found (flags), the parking of poison work, and the reads behind the
-- operator's queue. A flag leaves the instance where it is; parking moves it to
-- MANUAL_INTERVENTION. Flags are never deleted: clearing one records who cleared it and why.
--
-- PostgreSQL dialect: a flag raised inside a claim takes the database's clock when :now is NULL.

-- name: raise_flag
-- At most one open flag per instance and reason (a partial unique index): raising it again
-- while it is open changes nothing, so every worker's scan may raise the same flag.
INSERT INTO lf_attention (instance_id, reason_code, evidence, detected_at, detected_by)
VALUES (:instance_id, :reason_code, :evidence,
        coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)), :detected_by)
ON CONFLICT DO NOTHING;

-- name: clear_flag
UPDATE lf_attention
SET cleared_at = coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)), cleared_by = :cleared_by, cleared_reason = :reason
WHERE instance_id = :instance_id AND reason_code = :reason_code AND cleared_at IS NULL;

-- name: select_open_flags
-- Oldest first; every open flag, or those of one instance.
SELECT * FROM lf_attention
WHERE cleared_at IS NULL AND (CAST(:instance_id AS text) IS NULL OR instance_id = :instance_id)
ORDER BY detected_at, flag_id
LIMIT :limit;

-- name: park_crash_loop
-- Inside the claim that found the bound reached: the claim's own generation parks the instance
-- and gives the lease straight back, so it is never handed out again. The count starts over
-- (the reason keeps it), so an instance an operator resumes gets the whole bound again.
UPDATE lf_instances
SET status = 'MANUAL_INTERVENTION', reason_code = :reason_code, reason = :reason,
    cause = coalesce(cause, CAST(:reason_code AS text) || ': ' || CAST(:reason AS text)),
    owner = NULL, lease_expires_at = NULL, lease_expiries = 0, updated_at = :now
WHERE instance_id = :instance_id AND owner = :owner AND generation = :generation;

-- name: wake_held
-- The scan's answer to a lost wake-up: the waiting instance is due now, and its next owner
-- replays it and takes what it holds.
UPDATE lf_instances SET available_at = LEAST(available_at, :now)
WHERE instance_id = :instance_id AND status = 'WAITING';

-- name: attention_parked
-- Parked instances (an operator must decide), oldest parking first; filters are optional.
SELECT instance_id, tenant, workflow_name, business_key, status, reason_code, reason,
       updated_at AS since
FROM lf_instances
WHERE status IN ('MANUAL_INTERVENTION', 'FORWARD_RECOVERY_REQUIRED')
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
  AND (CAST(:workflow_name AS text) IS NULL OR workflow_name = :workflow_name)
  AND (CAST(:reason_code AS text) IS NULL OR reason_code = :reason_code)
ORDER BY updated_at, instance_id
LIMIT :limit;

-- name: attention_flagged
-- Open flags with what is known of their instance (a damaged row may not read as a record, so
-- only plain columns are taken), oldest first; filters are optional.
SELECT f.flag_id, f.instance_id, f.reason_code, f.evidence, f.detected_at AS since,
       f.detected_by, i.tenant, i.workflow_name, i.business_key, i.status
FROM lf_attention f
LEFT JOIN lf_instances i ON i.instance_id = f.instance_id
WHERE f.cleared_at IS NULL
  AND (CAST(:tenant AS text) IS NULL OR i.tenant = :tenant)
  AND (CAST(:workflow_name AS text) IS NULL OR i.workflow_name = :workflow_name)
  AND (CAST(:reason_code AS text) IS NULL OR f.reason_code = :reason_code)
ORDER BY f.detected_at, f.flag_id
LIMIT :limit;
