-- Signals: the consistency signals metrics report as gauges (parked and flagged instances by
-- reason, UNKNOWN effects still open and the oldest of them). Every process that exports
-- metrics reads them from the journal, at a bounded rate, so every worker reports the same
-- values and none has to be "the one" that does.

-- Each takes :tenant: one tenant's instances only (the console's home page for a scoped
-- principal), or NULL for every tenant (metrics).

-- name: count_parked_by_reason
SELECT coalesce(reason_code, 'unknown') AS reason, count(*) AS n FROM lf_instances
WHERE status = 'MANUAL_INTERVENTION' AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY coalesce(reason_code, 'unknown');

-- name: count_open_flags_by_reason
SELECT f.reason_code AS reason, count(*) AS n FROM lf_attention f
WHERE f.cleared_at IS NULL
  AND (:tenant IS NULL OR EXISTS (
      SELECT 1 FROM lf_instances i WHERE i.instance_id = f.instance_id AND i.tenant = :tenant))
GROUP BY f.reason_code;

-- name: unknown_effects_open
-- Every effect in doubt, and the earliest last change among them (an UNKNOWN effect changes
-- only while its lookup cannot be asked, so this is when the oldest doubt was last looked at).
SELECT count(*) AS n, min(e.updated_at) AS oldest FROM lf_effects e
WHERE e.state = 'UNKNOWN'
  AND (:tenant IS NULL OR EXISTS (
      SELECT 1 FROM lf_instances i WHERE i.instance_id = e.instance_id AND i.tenant = :tenant));

-- name: count_started_by_bucket
-- The instances started in [:since, :until), by the bucket of :bucket_seconds their start
-- falls in (0 the first) and the status they are in now: the console's activity chart. Reads
-- the lf_instances_created index; at most (until - since) / bucket_seconds buckets, times the
-- statuses, come back.
SELECT CAST((created_at - :since) / :bucket_seconds AS INTEGER) AS bucket, status,
       count(*) AS n
FROM lf_instances
WHERE created_at >= :since AND created_at < :until
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY bucket, status
ORDER BY bucket, status;
