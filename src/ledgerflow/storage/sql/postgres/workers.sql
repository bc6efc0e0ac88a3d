-- Workers: the registry of worker processes and the definitions each serves, for routing by
-- capability and for seeing due work that no live worker can run. Heartbeats are the workers'
-- own writes, never fenced: a worker row is not an instance and no lease guards it.

-- name: insert_worker_definitions
-- What the worker serves (:serves, a JSON array of {workflow_name, workflow_version,
-- fingerprint}), in one statement.
INSERT INTO lf_worker_definitions (worker_id, workflow_name, workflow_version, fingerprint)
SELECT :worker_id, s.workflow_name, s.workflow_version, s.fingerprint
FROM jsonb_to_recordset(CAST(:serves AS jsonb))
    AS s(workflow_name text, workflow_version bigint, fingerprint text)
ON CONFLICT DO NOTHING;

-- name: select_workers
-- Workers (the live ones: not stopped, heartbeat since :live_since; every one when NULL),
-- oldest first, at most :limit of them, one row per definition served.
SELECT w.worker_id, w.host, w.pid, w.started_at, w.slots, w.heartbeat_at, w.stopped_at,
       d.workflow_name, d.workflow_version, d.fingerprint
FROM lf_workers w
LEFT JOIN lf_worker_definitions d ON d.worker_id = w.worker_id
WHERE w.worker_id IN (
    SELECT worker_id FROM lf_workers
    WHERE CAST(:live_since AS double precision) IS NULL OR (stopped_at IS NULL AND heartbeat_at >= :live_since)
    ORDER BY started_at, worker_id
    LIMIT :limit)
ORDER BY w.started_at, w.worker_id, d.workflow_name, d.workflow_version, d.fingerprint;

-- name: scan_unserved
-- Runnable instances due (and with no live lease) since :cutoff that no live worker serves:
-- no worker with a heartbeat since :live_since announced their (workflow, version,
-- fingerprint). Due means its own due time, or for one whose owner's lease lapsed, the lapse.
SELECT i.instance_id, i.status, i.workflow_name, i.workflow_version, i.fingerprint,
       CASE WHEN i.owner IS NULL THEN i.available_at ELSE GREATEST(i.available_at, i.lease_expires_at) END AS due_at
FROM lf_instances i
WHERE i.status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND (i.owner IS NULL OR i.lease_expires_at <= :now)
  AND CASE WHEN i.owner IS NULL THEN i.available_at ELSE GREATEST(i.available_at, i.lease_expires_at) END <= :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM lf_worker_definitions d
      JOIN lf_workers w ON w.worker_id = d.worker_id
      WHERE d.workflow_name = i.workflow_name AND d.workflow_version = i.workflow_version
        AND d.fingerprint = i.fingerprint
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :live_since)
ORDER BY i.available_at, i.instance_id
LIMIT :limit;
