-- Audit: the append-only log of operator repairs, and the fence a repair takes before it
-- writes. Nothing here updates or deletes an audit row.

-- name: repair_fence
-- Take the instance for a repair: a new generation (a worker of an older one is refused at its
-- next write), no owner, claimable at once. Only if the planned generation still holds and no
-- worker holds a lease that has not lapsed. A repair is progress: the crash-loop count restarts.
UPDATE lf_instances
SET generation = generation + 1, owner = NULL, lease_expires_at = NULL, available_at = :now,
    lease_expiries = 0, updated_at = :now
WHERE instance_id = :instance_id AND generation = :generation
  AND (owner IS NULL OR lease_expires_at <= :lease_now)
RETURNING generation;

-- name: select_audit
-- Newest first (the caller shows them oldest first); every filter is optional.
SELECT * FROM lf_audit
WHERE (:instance_id IS NULL OR instance_id = :instance_id)
  AND (:actor IS NULL OR actor = :actor)
  AND (:kind IS NULL OR kind = :kind)
  AND (:since IS NULL OR at >= :since)
  AND (:before_id IS NULL OR audit_id < :before_id)
  -- A tenant sees the records of its own instances only.
  AND (:tenant IS NULL OR instance_id IN (SELECT instance_id FROM lf_instances WHERE tenant = :tenant))
ORDER BY audit_id DESC
LIMIT :limit;
