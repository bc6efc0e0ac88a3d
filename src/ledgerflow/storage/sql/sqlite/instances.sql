-- Instances: start by business key, claim with a lease, fence every write on the generation.

-- name: insert_instance
-- A new instance, unowned: RUNNING and due now, or SCHEDULED and due at its start time (a
-- delayed start; :status and :available_at say which). Conflicts on the business key are left to the
-- caller, which reads the existing instance back. Nothing is inserted for a retired version
-- (the caller finds no instance then, and says why). A child names its parent's link.
INSERT INTO lf_instances (
    instance_id, tenant, workflow_name, workflow_version, fingerprint, business_key, run,
    status, owner, generation, lease_expires_at, available_at, input, created_at, updated_at,
    parent_instance_id, parent_run, parent_seq, on_parent_end, reason_code, reason
)
SELECT :instance_id, :tenant, :workflow_name, :workflow_version, :fingerprint, :business_key, 1,
       :status, NULL, 0, NULL, :available_at, :input, :now, :now,
       :parent_instance_id, :parent_run, :parent_seq, :on_parent_end, :reason_code, :reason
WHERE NOT EXISTS (
    SELECT 1 FROM lf_retired_versions
    WHERE workflow_name = :workflow_name AND workflow_version = :workflow_version
)
ON CONFLICT DO NOTHING;

-- name: get_instances
-- Many instances in one statement (ids as a JSON array): result waiters read together.
SELECT * FROM lf_instances WHERE instance_id IN (SELECT value FROM json_each(:ids));

-- name: list_instances
-- Newest first; every filter is optional.
SELECT * FROM lf_instances
WHERE (:status IS NULL OR status = :status)
  AND (:workflow_name IS NULL OR workflow_name = :workflow_name)
  AND (:tenant IS NULL OR tenant = :tenant)
ORDER BY created_at DESC, instance_id
LIMIT :limit;

-- name: select_claimable
-- Routed by capability: only instances pinned to a definition the worker serves (:serves, a
-- JSON array of {workflow_name, workflow_version, fingerprint}; NULL for a caller that runs no
-- workflow code and takes any), so no worker ever holds an instance it cannot run.
-- Runnable, due, and either unowned or with a lapsed lease; never one the claiming worker is
-- still driving (:running, a JSON array of ids): a lease of its own that lapsed while a store
-- stall held its heartbeat back is renewed, not taken again beside the copy that runs.
SELECT instance_id FROM lf_instances
WHERE status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at <= :now
  AND (owner IS NULL OR lease_expires_at <= :now
       -- An effect attempt of this owner's generation missed its heartbeat (0020): the
       -- owner is taken to be cut off before its lease runs out.
       OR EXISTS (
           SELECT 1 FROM lf_effects e
           WHERE e.instance_id = lf_instances.instance_id
             AND e.heartbeat_due_at <= :now
             AND e.state = 'INTENDED' AND e.heartbeat_attempt = e.attempt
             AND e.heartbeat_generation = lf_instances.generation))
  AND NOT (owner = :owner AND instance_id IN (SELECT value FROM json_each(:running)))
  AND (:serves IS NULL OR EXISTS (
      SELECT 1 FROM json_each(:serves) s
      WHERE json_extract(s.value, '$.workflow_name') = lf_instances.workflow_name
        AND json_extract(s.value, '$.workflow_version') = lf_instances.workflow_version
        AND json_extract(s.value, '$.fingerprint') = lf_instances.fingerprint))
  AND NOT EXISTS (
      SELECT 1 FROM lf_limits l
      WHERE l.scope IN ('workflow:' || lf_instances.workflow_name, 'tenant:' || lf_instances.tenant)
        AND l.in_flight_max <= (
            SELECT count(*) FROM lf_instances o
            WHERE o.owner IS NOT NULL AND o.lease_expires_at > :now
              AND (l.scope = 'workflow:' || o.workflow_name OR l.scope = 'tenant:' || o.tenant)))
ORDER BY available_at, instance_id
LIMIT :limit;

-- name: claim_instance
-- Take ownership with a new, higher generation. Repeats the claimability test so that two
-- claimers racing for one instance cannot both win, and that the instance is still pinned to a
-- definition the worker serves (an operator may have moved it meanwhile). Taking it from an
-- owner whose lease ran out counts one more lease expiry in a row (the crash-loop count),
-- unless the claimer takes back what it lost to its own store stalling (not a death).
UPDATE lf_instances
SET owner = :owner, generation = generation + 1,
    -- What arrived before this claim, the new owner reads; only later arrivals count.
    arrived_since_claim = 0,
    -- A lease this claimer lost to its own store (:retaking) is no crash of the instance.
    lease_expiries = lease_expiries + CASE
        WHEN owner IS NULL OR (owner = :owner AND instance_id IN (SELECT value FROM json_each(:retaking))) THEN 0
        ELSE 1 END,
    lease_expires_at = :lease_expires_at,
    updated_at = :now
WHERE instance_id = :instance_id
  AND status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at <= :now
  AND (owner IS NULL OR lease_expires_at <= :now
       -- An effect attempt of this owner's generation missed its heartbeat (0020): the
       -- owner is taken to be cut off before its lease runs out.
       OR EXISTS (
           SELECT 1 FROM lf_effects e
           WHERE e.instance_id = lf_instances.instance_id
             AND e.heartbeat_due_at <= :now
             AND e.state = 'INTENDED' AND e.heartbeat_attempt = e.attempt
             AND e.heartbeat_generation = lf_instances.generation))
  AND (:serves IS NULL OR EXISTS (
      SELECT 1 FROM json_each(:serves) s
      WHERE json_extract(s.value, '$.workflow_name') = lf_instances.workflow_name
        AND json_extract(s.value, '$.workflow_version') = lf_instances.workflow_version
        AND json_extract(s.value, '$.fingerprint') = lf_instances.fingerprint))
  AND NOT EXISTS (
      SELECT 1 FROM lf_limits l
      WHERE l.scope IN ('workflow:' || lf_instances.workflow_name, 'tenant:' || lf_instances.tenant)
        AND l.in_flight_max <= (
            SELECT count(*) FROM lf_instances o
            WHERE o.owner IS NOT NULL AND o.lease_expires_at > :now
              AND (l.scope = 'workflow:' || o.workflow_name OR l.scope = 'tenant:' || o.tenant)))
RETURNING *;

-- name: claim_started
-- The claims of a group's new instances, in one statement (ids as a JSON array) for one owner
-- and lease, instead of one claim_instance each. Only an instance just inserted, never owned
-- (generation 0), due now: none has a lease to lapse, an effect heartbeat or a crash loop to
-- count. An instance in the scope of a concurrency limit is left to claim_instance, one at a
-- time, so that each claim counts the ones before it (one statement sees none of its own).
UPDATE lf_instances
SET owner = :owner, generation = generation + 1, arrived_since_claim = 0,
    lease_expires_at = :lease_expires_at, updated_at = :now
WHERE instance_id IN (SELECT value FROM json_each(:ids))
  AND owner IS NULL AND generation = 0
  AND status IN ('SCHEDULED', 'RUNNING')
  AND available_at <= :now
  AND NOT EXISTS (
      SELECT 1 FROM lf_limits l
      WHERE l.scope IN ('workflow:' || lf_instances.workflow_name, 'tenant:' || lf_instances.tenant))
RETURNING *;

-- name: renew_lease
UPDATE lf_instances
SET lease_expires_at = :lease_expires_at
WHERE instance_id = :instance_id AND owner = :owner AND generation = :generation;

-- name: fence_instances
-- fence_instance for a whole group commit in one statement (a JSON array of {instance_id,
-- owner, generation}): returns the instances this owner still holds at that generation.
UPDATE lf_instances
SET updated_at = :now, lease_expiries = 0
WHERE (instance_id, owner, generation) IN (
    SELECT json_extract(value, '$.instance_id'), json_extract(value, '$.owner'),
           json_extract(value, '$.generation')
    FROM json_each(:fences)
)
RETURNING instance_id;

-- name: set_status
UPDATE lf_instances
SET status = :status, result = :result, reason_code = :reason_code, reason = :reason,
    -- The first cause given since the instance last ran is kept to its end (a compensation
    -- that is parked still names the failure that started it); running again clears it.
    cause = CASE WHEN :status IN ('RUNNING', 'WAITING', 'SUCCEEDED') THEN NULL
                 ELSE coalesce(cause, :cause) END,
    updated_at = :now
WHERE instance_id = :instance_id AND generation = :generation AND status = :expected;

-- name: note_cancel_settled
-- The timeline's entry for settle_cancel_request, sent just before it (same condition).
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT instance_id, :now, :generation, 'cancel', 'requested',
       CASE WHEN :status = 'CANCELLED' THEN 'honoured' ELSE 'overtaken' END,
       CASE WHEN :status = 'CANCELLED' THEN 'the instance ended CANCELLED'
            ELSE 'the instance ended ' || :status || ' before it reached a point where it '
                 || 'could stop' END
FROM lf_instances
WHERE instance_id = :instance_id AND cancel_requested_at IS NOT NULL AND cancel_outcome IS NULL;

-- name: settle_cancel_request
-- An instance that ends with an accepted cancel request records what became of it: honoured
-- when it ended CANCELLED, overtaken when it ended otherwise first (a completion already on
-- its way wins over a request that arrived after its last step began).
UPDATE lf_instances
SET cancel_outcome = CASE WHEN :status = 'CANCELLED' THEN 'honoured' ELSE 'overtaken' END
WHERE instance_id = :instance_id AND cancel_requested_at IS NOT NULL AND cancel_outcome IS NULL;

-- name: release_instance
-- A park that no arrival can be lost behind: when a signal, callback or cancel request arrived
-- after this owner's claim, the owner may have decided this wake-up time without it (it read the
-- inbox or the request before), so the instance is due now instead and the next claim reads it.
UPDATE lf_instances
SET owner = NULL, lease_expires_at = NULL,
    available_at = CASE WHEN arrived_since_claim <> 0 THEN min(:available_at, :now)
                        ELSE :available_at END,
    updated_at = :now
WHERE instance_id = :instance_id AND generation = :generation;

-- name: next_available_at
-- When the earliest runnable instance becomes claimable: its due time, or for one still held,
-- the later of that and its lease expiry. A waiting instance counts when its timer is set (a
-- wait with no timeout is due at :never, and so is a damaged row set aside by a claim). NULL
-- when nothing is runnable at all. Only instances a worker serving :serves could claim count
-- (NULL: every one), so a worker does not wait for work it will never take, and those of a
-- workflow and version in :adopts whatever their fingerprint (work it may adopt, one with an
-- effect in doubt too: not one flagged as not replaying against the adopting code, nor one
-- flagged as holding an UNKNOWN effect that code does not reach).
SELECT min(
    CASE WHEN owner IS NULL THEN available_at ELSE max(available_at, lease_expires_at) END
) AS at
FROM lf_instances
WHERE status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at < :never
  AND (:serves IS NULL OR EXISTS (
      SELECT 1 FROM json_each(:serves) s
      WHERE json_extract(s.value, '$.workflow_name') = lf_instances.workflow_name
        AND json_extract(s.value, '$.workflow_version') = lf_instances.workflow_version
        AND json_extract(s.value, '$.fingerprint') = lf_instances.fingerprint)
      OR (EXISTS (
          SELECT 1 FROM json_each(:adopts) a
          WHERE json_extract(a.value, '$.workflow_name') = lf_instances.workflow_name
            AND json_extract(a.value, '$.workflow_version') = lf_instances.workflow_version)
        AND NOT EXISTS (
          SELECT 1 FROM lf_attention f
          WHERE f.instance_id = lf_instances.instance_id AND f.cleared_at IS NULL
            AND f.reason_code IN ('replay_divergence', 'adoption_refused'))));

-- name: count_by_status
-- Of one tenant (:tenant), or of all (NULL).
SELECT status, count(*) AS n FROM lf_instances
WHERE (:tenant IS NULL OR tenant = :tenant)
GROUP BY status;

-- name: request_cancel
-- The first request wins: repeating it changes nothing. It also makes a suspended instance
-- due now, so that a worker takes it and cancels it without waiting for its wake-up time, and
-- counts as an arrival, so that an owner's later park cannot put it back to sleep.
UPDATE lf_instances
SET cancel_requested_at = coalesce(cancel_requested_at, :now),
    cancel_reason = coalesce(cancel_reason, :reason),
    cancel_compensate = coalesce(cancel_compensate, :compensate),
    available_at = min(available_at, :now),
    arrived_since_claim = 1
WHERE instance_id = :instance_id
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED',
                     'FORWARD_RECOVERY_REQUIRED', 'MANUAL_INTERVENTION')
  AND cancel_requested_at IS NULL;

-- name: lock_instance
-- Read an instance inside a write transaction (SQLite's BEGIN IMMEDIATE already holds the one
-- write lock, so this is a plain read here; PostgreSQL locks the row).
SELECT * FROM lf_instances WHERE instance_id = :instance_id;

-- name: page_instances
-- One page of a filtered listing, newest first, after the (created_at, instance_id) position
-- the previous page ended at (keyset paging: stable while new instances arrive). Every filter
-- is optional; :flagged asks for instances with (1) or without (0) an open attention flag.
SELECT * FROM lf_instances i
WHERE (:tenant IS NULL OR i.tenant = :tenant)
  AND (:workflow_name IS NULL OR i.workflow_name = :workflow_name)
  AND (:workflow_version IS NULL OR i.workflow_version = :workflow_version)
  AND (:status IS NULL OR i.status = :status)
  AND (:key_prefix IS NULL OR substr(i.business_key, 1, length(:key_prefix)) = :key_prefix)
  AND (:flagged IS NULL OR :flagged = EXISTS (
      SELECT 1 FROM lf_attention a WHERE a.instance_id = i.instance_id AND a.cleared_at IS NULL))
  AND (:reason_code IS NULL OR i.reason_code = :reason_code)
  AND (:created_from IS NULL OR i.created_at >= :created_from)
  AND (:created_until IS NULL OR i.created_at < :created_until)
  AND (:after_at IS NULL OR i.created_at < :after_at
       OR (i.created_at = :after_at AND i.instance_id < :after_id))
ORDER BY i.created_at DESC, i.instance_id DESC
LIMIT :limit;

-- name: count_versions
-- What the journal holds of each definition: instances per workflow, version, fingerprint and
-- status (of one tenant, or of all).
SELECT workflow_name, workflow_version, fingerprint, status, count(*) AS instances,
       min(created_at) AS first_created_at, max(created_at) AS last_created_at
FROM lf_instances
WHERE (:tenant IS NULL OR tenant = :tenant)
GROUP BY workflow_name, workflow_version, fingerprint, status
ORDER BY workflow_name, workflow_version DESC, fingerprint, status;

-- name: note_children_cancelled
-- The timeline's entry of each child cancel_children asks, sent just before it (same rows).
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT instance_id, :now, generation, 'cancel', NULL, 'requested',
       'its parent ' || :instance_id || ' ended ' || :status
FROM lf_instances
WHERE parent_instance_id = :instance_id AND on_parent_end = 'cancel' AND cancel_requested_at IS NULL
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED',
                     'FORWARD_RECOVERY_REQUIRED', 'MANUAL_INTERVENTION');

-- name: cancel_children
-- A parent that ends for good asks each live child started with on_parent_end 'cancel' to
-- cancel, in its ending's transaction (through the parent index): as request_cancel does, the
-- first request stands, a suspended child is due now and the request counts as an arrival.
UPDATE lf_instances
SET cancel_requested_at = :now,
    cancel_reason = 'its parent ' || :instance_id || ' ended ' || :status,
    cancel_compensate = 1,
    available_at = min(available_at, :now),
    arrived_since_claim = 1
WHERE parent_instance_id = :instance_id AND on_parent_end = 'cancel' AND cancel_requested_at IS NULL
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED',
                     'FORWARD_RECOVERY_REQUIRED', 'MANUAL_INTERVENTION');
