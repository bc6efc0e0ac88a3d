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

-- name: insert_worker_definitions
-- What the worker serves (:serves, a JSON array of {workflow_name, workflow_version,
-- fingerprint}), in one statement.
INSERT INTO lf_worker_definitions (worker_id, workflow_name, workflow_version, fingerprint)
SELECT :worker_id, json_extract(value, '$.workflow_name'), json_extract(value, '$.workflow_version'),
       json_extract(value, '$.fingerprint')
FROM json_each(:serves) WHERE true
ON CONFLICT DO NOTHING;

-- name: heartbeat_worker
-- Zero rows: the row is gone (pruned) or the worker was marked stopped; it registers again.
UPDATE lf_workers SET heartbeat_at = :now WHERE worker_id = :worker_id AND stopped_at IS NULL;

-- name: stop_worker
-- A clean shutdown: the worker is no longer live as soon as it says so.
UPDATE lf_workers SET stopped_at = :now, heartbeat_at = :now WHERE worker_id = :worker_id;

-- name: select_workers
-- Workers (the live ones: not stopped, heartbeat since :live_since; every one when NULL),
-- oldest first, at most :limit of them, one row per definition served.
SELECT w.worker_id, w.host, w.pid, w.started_at, w.slots, w.heartbeat_at, w.stopped_at,
       d.workflow_name, d.workflow_version, d.fingerprint
FROM lf_workers w
LEFT JOIN lf_worker_definitions d ON d.worker_id = w.worker_id
WHERE w.worker_id IN (
    SELECT worker_id FROM lf_workers
    WHERE :live_since IS NULL OR (stopped_at IS NULL AND heartbeat_at >= :live_since)
    ORDER BY started_at, worker_id
    LIMIT :limit)
ORDER BY w.started_at, w.worker_id, d.workflow_name, d.workflow_version, d.fingerprint;

-- name: scan_unserved
-- Runnable instances due (and with no live lease) since :cutoff that no live worker serves:
-- no worker with a heartbeat since :live_since announced their (workflow, version,
-- fingerprint). Due means its own due time, or for one whose owner's lease lapsed, the lapse.
SELECT i.instance_id, i.status, i.workflow_name, i.workflow_version, i.fingerprint,
       CASE WHEN i.owner IS NULL THEN i.available_at ELSE max(i.available_at, i.lease_expires_at) END AS due_at
FROM lf_instances i
WHERE i.status IN ('RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND (i.owner IS NULL OR i.lease_expires_at <= :now)
  AND CASE WHEN i.owner IS NULL THEN i.available_at ELSE max(i.available_at, i.lease_expires_at) END <= :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM lf_worker_definitions d
      JOIN lf_workers w ON w.worker_id = d.worker_id
      WHERE d.workflow_name = i.workflow_name AND d.workflow_version = i.workflow_version
        AND d.fingerprint = i.fingerprint
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :live_since)
ORDER BY i.available_at, i.instance_id
LIMIT :limit;

-- name: count_unserved
-- Instances not ended, per definition that no live worker serves (none with a heartbeat since
-- :live_since announced it), and how many of each are due at :now: what a worker reports at
-- start and whenever it changes, and the unserved gauge.
SELECT i.workflow_name, i.workflow_version, i.fingerprint, count(*) AS instances,
       sum(CASE WHEN i.available_at <= :now THEN 1 ELSE 0 END) AS due
FROM lf_instances i
WHERE i.status IN ('RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND NOT EXISTS (
      SELECT 1 FROM lf_worker_definitions d
      JOIN lf_workers w ON w.worker_id = d.worker_id
      WHERE d.workflow_name = i.workflow_name AND d.workflow_version = i.workflow_version
        AND d.fingerprint = i.fingerprint
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :live_since)
GROUP BY i.workflow_name, i.workflow_version, i.fingerprint
ORDER BY i.workflow_name, i.workflow_version, i.fingerprint
LIMIT :limit;
