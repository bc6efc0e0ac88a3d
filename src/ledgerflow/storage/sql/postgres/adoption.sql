-- Adoption: a worker takes an instance pinned to code that no live worker serves onto its own
-- code of the same workflow and version, once a replay of the instance's journal against that
-- code came out clean. The repin, the claim and the audit record are one transaction.

-- name: select_adoptable
-- Due instances (their own due time, or a lapsed lease) pinned to a fingerprint of a workflow
-- and version the worker adopts into (:adopts, a JSON array of {workflow_name,
-- workflow_version, fingerprint}: the worker's own fingerprint) that no live worker serves
-- (none with a heartbeat since :live_since announced it), excluding what the worker drives
-- (:running). A compensation or cancellation under way is finished on the code that began it.
-- An effect in doubt (UNKNOWN) does not keep it out: the worker adopts it only if the replay
-- reaches that effect asking for the very same one, and its effect driver then settles it by
-- the protocol (runtime/adoption.py: in_doubt_refusal).
SELECT i.* FROM lf_instances i
WHERE i.status IN ('SCHEDULED', 'RUNNING', 'WAITING')
  AND i.available_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
  AND (i.owner IS NULL OR i.lease_expires_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)))
  AND i.instance_id NOT IN (SELECT jsonb_array_elements_text(CAST(:running AS jsonb)))
  AND EXISTS (
      SELECT 1 FROM jsonb_to_recordset(CAST(:adopts AS jsonb))
          AS a(workflow_name text, workflow_version bigint, fingerprint text)
      WHERE a.workflow_name = i.workflow_name AND a.workflow_version = i.workflow_version
        AND a.fingerprint <> i.fingerprint)
  AND NOT EXISTS (
      SELECT 1 FROM lf_worker_definitions d
      JOIN lf_workers w ON w.worker_id = d.worker_id
      WHERE d.workflow_name = i.workflow_name AND d.workflow_version = i.workflow_version
        AND d.fingerprint = i.fingerprint
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :live_since)
ORDER BY i.available_at, i.instance_id
LIMIT :limit;

-- name: repin_for_adoption
-- The adoption's first write, conditional on everything the replay and the choice read: the
-- same generation (nothing was journaled since the replay read the journal: every owner's
-- writes follow a claim, which raises it), the same pin, still due and unheld, and still no
-- live worker serving the old code. The claim that follows takes it with a new generation.
UPDATE lf_instances SET fingerprint = :fingerprint
WHERE instance_id = :instance_id AND generation = :generation
  AND fingerprint = :expected_fingerprint
  AND status IN ('SCHEDULED', 'RUNNING', 'WAITING')
  AND available_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
  AND (owner IS NULL OR lease_expires_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)))
  AND NOT EXISTS (
      SELECT 1 FROM lf_worker_definitions d
      JOIN lf_workers w ON w.worker_id = d.worker_id
      WHERE d.workflow_name = lf_instances.workflow_name
        AND d.workflow_version = lf_instances.workflow_version
        AND d.fingerprint = :expected_fingerprint
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :live_since);
