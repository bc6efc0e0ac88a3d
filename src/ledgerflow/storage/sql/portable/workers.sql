-- Workers: the registry of worker processes and the definitions each serves, for routing by
-- capability and for seeing due work that no live worker can run. Heartbeats are the workers'
-- own writes, never fenced: a worker row is not an instance and no lease guards it.

-- name: prune_worker_definitions
-- Definitions of workers stopped or silent since :before (the retention bound): a registry
-- that grows with every deploy forever would be unbounded.
DELETE FROM lf_worker_definitions
WHERE worker_id IN (SELECT worker_id FROM lf_workers WHERE heartbeat_at < :before);

-- name: prune_workers
DELETE FROM lf_workers WHERE heartbeat_at < :before;

-- name: upsert_worker
-- A worker announces itself when it starts (and again if its row went missing).
INSERT INTO lf_workers (worker_id, host, pid, started_at, slots, heartbeat_at, stopped_at)
VALUES (:worker_id, :host, :pid, :started_at, :slots, :heartbeat_at, NULL)
ON CONFLICT (worker_id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, slots = excluded.slots,
    heartbeat_at = excluded.heartbeat_at, stopped_at = NULL;

-- name: forget_worker_definitions
DELETE FROM lf_worker_definitions WHERE worker_id = :worker_id;

-- name: heartbeat_worker
-- Zero rows: the row is gone (pruned) or the worker was marked stopped; it registers again.
UPDATE lf_workers SET heartbeat_at = :now WHERE worker_id = :worker_id AND stopped_at IS NULL;

-- name: stop_worker
-- A clean shutdown: the worker is no longer live as soon as it says so.
UPDATE lf_workers SET stopped_at = :now, heartbeat_at = :now WHERE worker_id = :worker_id;

-- name: count_unserved
-- Instances not ended, per definition that no live worker serves (none with a heartbeat since
-- :live_since announced it), and how many of each are due at :now: what a worker reports at
-- start and whenever it changes, and the unserved gauge.
SELECT i.workflow_name, i.workflow_version, i.fingerprint, count(*) AS instances,
       sum(CASE WHEN i.available_at <= :now THEN 1 ELSE 0 END) AS due
FROM lf_instances i
WHERE i.status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND NOT EXISTS (
      SELECT 1 FROM lf_worker_definitions d
      JOIN lf_workers w ON w.worker_id = d.worker_id
      WHERE d.workflow_name = i.workflow_name AND d.workflow_version = i.workflow_version
        AND d.fingerprint = i.fingerprint
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :live_since)
GROUP BY i.workflow_name, i.workflow_version, i.fingerprint
ORDER BY i.workflow_name, i.workflow_version, i.fingerprint
LIMIT :limit;
