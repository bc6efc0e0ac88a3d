-- Instances: start by business key, claim with a lease, fence every write on the generation.
--
-- PostgreSQL dialect: leases are measured by the database's clock, shared by every worker on
-- every machine; :now is only a test override (NULL in service).

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
       :parent_instance_id, CAST(:parent_run AS bigint), CAST(:parent_seq AS bigint),
       :on_parent_end, :reason_code, :reason
WHERE NOT EXISTS (
    SELECT 1 FROM lf_retired_versions
    WHERE workflow_name = :workflow_name AND workflow_version = CAST(:workflow_version AS bigint)
)
ON CONFLICT DO NOTHING;

-- name: get_instances
-- Many instances in one statement (ids as a JSON array): result waiters read together.
SELECT * FROM lf_instances
WHERE instance_id IN (SELECT jsonb_array_elements_text(CAST(:ids AS jsonb)));

-- name: list_instances
-- Newest first; every filter is optional.
SELECT * FROM lf_instances
WHERE (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:workflow_name AS text) IS NULL OR workflow_name = :workflow_name)
  AND (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
ORDER BY created_at DESC, instance_id
LIMIT :limit;

-- name: select_claimable
-- Routed by capability: only instances pinned to a definition the worker serves (:serves, a
-- JSON array of {workflow_name, workflow_version, fingerprint}; NULL for a caller that runs no
-- workflow code and takes any), so no worker ever holds an instance it cannot run.
-- Runnable, due, and either unowned or with a lapsed lease; never one the claiming worker is
-- still driving (:running, a JSON array of ids): a lease of its own that lapsed while a store
-- stall held its heartbeat back is renewed, not taken again beside the copy that runs. SKIP LOCKED: a row another worker
-- is claiming right now is passed over instead of waited for.
-- The index lf_instances_claimable (0024) serves the order: a claim reads the first due rows it
-- may take and stops, at any backlog. The due time is read once, as a subquery: clock_timestamp()
-- is volatile, and compared row by row it could not bound the index scan, so a claim with
-- little due work read every instance due later too (parked and waiting ones).
SELECT instance_id FROM lf_instances
WHERE status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at <= (SELECT coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)))
  AND (owner IS NULL OR lease_expires_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
       -- An effect attempt of this owner's generation missed its heartbeat (0020): the
       -- owner is taken to be cut off before its lease runs out.
       OR EXISTS (
           SELECT 1 FROM lf_effects e
           WHERE e.instance_id = lf_instances.instance_id
             AND e.heartbeat_due_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
             AND e.state = 'INTENDED' AND e.heartbeat_attempt = e.attempt
             AND e.heartbeat_generation = lf_instances.generation))
  AND NOT (owner IS NOT NULL AND owner = :owner
           AND instance_id IN (SELECT jsonb_array_elements_text(CAST(:running AS jsonb))))
  AND (CAST(:serves AS text) IS NULL OR EXISTS (
      SELECT 1 FROM jsonb_to_recordset(CAST(:serves AS jsonb))
          AS s(workflow_name text, workflow_version bigint, fingerprint text)
      WHERE s.workflow_name = lf_instances.workflow_name
        AND s.workflow_version = lf_instances.workflow_version
        AND s.fingerprint = lf_instances.fingerprint))
  AND NOT EXISTS (
      SELECT 1 FROM lf_limits l
      WHERE l.scope IN ('workflow:' || lf_instances.workflow_name, 'tenant:' || lf_instances.tenant)
        AND l.in_flight_max <= (
            SELECT count(*) FROM lf_instances o
            WHERE o.owner IS NOT NULL AND o.lease_expires_at > coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
              AND (l.scope = 'workflow:' || o.workflow_name OR l.scope = 'tenant:' || o.tenant)))
ORDER BY available_at, instance_id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

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
        WHEN owner IS NULL OR (owner = :owner AND instance_id IN (SELECT jsonb_array_elements_text(CAST(:retaking AS jsonb)))) THEN 0
        ELSE 1 END,
    lease_expires_at = coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)) + :lease_seconds,
    updated_at = coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
WHERE instance_id = :instance_id
  AND status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
  AND (owner IS NULL OR lease_expires_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
       -- An effect attempt of this owner's generation missed its heartbeat (0020): the
       -- owner is taken to be cut off before its lease runs out.
       OR EXISTS (
           SELECT 1 FROM lf_effects e
           WHERE e.instance_id = lf_instances.instance_id
             AND e.heartbeat_due_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
             AND e.state = 'INTENDED' AND e.heartbeat_attempt = e.attempt
             AND e.heartbeat_generation = lf_instances.generation))
  AND (CAST(:serves AS text) IS NULL OR EXISTS (
      SELECT 1 FROM jsonb_to_recordset(CAST(:serves AS jsonb))
          AS s(workflow_name text, workflow_version bigint, fingerprint text)
      WHERE s.workflow_name = lf_instances.workflow_name
        AND s.workflow_version = lf_instances.workflow_version
        AND s.fingerprint = lf_instances.fingerprint))
  AND NOT EXISTS (
      SELECT 1 FROM lf_limits l
      WHERE l.scope IN ('workflow:' || lf_instances.workflow_name, 'tenant:' || lf_instances.tenant)
        AND l.in_flight_max <= (
            SELECT count(*) FROM lf_instances o
            WHERE o.owner IS NOT NULL AND o.lease_expires_at > coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
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
    lease_expires_at = coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)) + :lease_seconds,
    updated_at = coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
WHERE instance_id IN (SELECT jsonb_array_elements_text(CAST(:ids AS jsonb)))
  AND owner IS NULL AND generation = 0
  AND status IN ('SCHEDULED', 'RUNNING')
  AND available_at <= coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision))
  AND NOT EXISTS (
      SELECT 1 FROM lf_limits l
      WHERE l.scope IN ('workflow:' || lf_instances.workflow_name, 'tenant:' || lf_instances.tenant))
RETURNING *;

-- name: renew_lease
UPDATE lf_instances
SET lease_expires_at = coalesce(CAST(:now AS double precision), CAST(extract(epoch FROM clock_timestamp()) AS double precision)) + :lease_seconds
WHERE instance_id = :instance_id AND owner = :owner AND generation = :generation;

-- name: fence_instances
-- fence_instance for a whole group commit in one statement (a JSON array of {instance_id,
-- owner, generation}): returns the instances this owner still holds at that generation.
UPDATE lf_instances AS i
SET updated_at = :now, lease_expiries = 0
FROM jsonb_to_recordset(CAST(:fences AS jsonb)) AS f(instance_id text, owner text, generation bigint)
WHERE i.instance_id = f.instance_id AND i.owner = f.owner AND i.generation = f.generation
RETURNING i.instance_id;

-- name: set_status
UPDATE lf_instances
SET status = :status, result = :result, reason_code = :reason_code, reason = :reason,
    -- The first cause given since the instance last ran is kept to its end (a compensation
    -- that is parked still names the failure that started it); running again clears it.
    cause = CASE WHEN CAST(:status AS text) IN ('RUNNING', 'WAITING', 'SUCCEEDED') THEN NULL
                 ELSE coalesce(cause, CAST(:cause AS text)) END,
    updated_at = :now
WHERE instance_id = :instance_id AND generation = :generation AND status = :expected;

-- name: note_cancel_settled
-- The timeline's entry for settle_cancel_request, sent just before it (same condition).
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT instance_id, :now, :generation, 'cancel', 'requested',
       CASE WHEN CAST(:status AS text) = 'CANCELLED' THEN 'honoured' ELSE 'overtaken' END,
       CASE WHEN CAST(:status AS text) = 'CANCELLED' THEN 'the instance ended CANCELLED'
            ELSE 'the instance ended ' || CAST(:status AS text) || ' before it reached a point where it '
                 || 'could stop' END
FROM lf_instances
WHERE instance_id = :instance_id AND cancel_requested_at IS NOT NULL AND cancel_outcome IS NULL;

-- name: settle_cancel_request
-- An instance that ends with an accepted cancel request records what became of it: honoured
-- when it ended CANCELLED, overtaken when it ended otherwise first (a completion already on
-- its way wins over a request that arrived after its last step began).
UPDATE lf_instances
SET cancel_outcome = CASE WHEN CAST(:status AS text) = 'CANCELLED' THEN 'honoured' ELSE 'overtaken' END
WHERE instance_id = :instance_id AND cancel_requested_at IS NOT NULL AND cancel_outcome IS NULL;

-- name: release_instance
-- A park that no arrival can be lost behind: when a signal, callback or cancel request arrived
-- after this owner's claim, the owner may have decided this wake-up time without it (it read the
-- inbox or the request before), so the instance is due now instead and the next claim reads it.
UPDATE lf_instances
SET owner = NULL, lease_expires_at = NULL,
    available_at = CASE WHEN arrived_since_claim <> 0 THEN LEAST(:available_at, :now)
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
    CASE WHEN owner IS NULL THEN available_at ELSE GREATEST(available_at, lease_expires_at) END
) AS at
FROM lf_instances
WHERE status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at < :never
  AND (CAST(:serves AS text) IS NULL OR EXISTS (
      SELECT 1 FROM jsonb_to_recordset(CAST(:serves AS jsonb))
          AS s(workflow_name text, workflow_version bigint, fingerprint text)
      WHERE s.workflow_name = lf_instances.workflow_name
        AND s.workflow_version = lf_instances.workflow_version
        AND s.fingerprint = lf_instances.fingerprint)
      OR (EXISTS (
          SELECT 1 FROM jsonb_to_recordset(CAST(:adopts AS jsonb))
              AS a(workflow_name text, workflow_version bigint, fingerprint text)
          WHERE a.workflow_name = lf_instances.workflow_name
            AND a.workflow_version = lf_instances.workflow_version)
        AND NOT EXISTS (
          SELECT 1 FROM lf_attention f
          WHERE f.instance_id = lf_instances.instance_id AND f.cleared_at IS NULL
            AND f.reason_code IN ('replay_divergence', 'adoption_refused'))));

-- name: count_by_status
-- Of one tenant (:tenant), or of all (NULL).
SELECT status, count(*) AS n FROM lf_instances
WHERE (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
GROUP BY status;

-- name: request_cancel
-- The first request wins: repeating it changes nothing. It also makes a suspended instance
-- due now, so that a worker takes it and cancels it without waiting for its wake-up time, and
-- counts as an arrival, so that an owner's later park cannot put it back to sleep.
UPDATE lf_instances
SET cancel_requested_at = coalesce(cancel_requested_at, :now),
    cancel_reason = coalesce(cancel_reason, :reason),
    cancel_compensate = coalesce(cancel_compensate, :compensate),
    available_at = LEAST(available_at, :now),
    arrived_since_claim = 1
WHERE instance_id = :instance_id
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED',
                     'FORWARD_RECOVERY_REQUIRED', 'MANUAL_INTERVENTION')
  AND cancel_requested_at IS NULL;

-- name: lock_instance
-- Read an instance and hold its row until the transaction ends: a delivery or a cancel request
-- then serialises with the owner's commits, which lock the same row.
SELECT * FROM lf_instances WHERE instance_id = :instance_id FOR UPDATE;

-- name: page_instances
-- One page of a filtered listing, newest first, after the (created_at, instance_id) position
-- the previous page ended at (keyset paging: stable while new instances arrive). Every filter
-- is optional; :flagged asks for instances with (1) or without (0) an open attention flag.
SELECT * FROM lf_instances i
WHERE (CAST(:tenant AS text) IS NULL OR i.tenant = :tenant)
  AND (CAST(:workflow_name AS text) IS NULL OR i.workflow_name = :workflow_name)
  AND (CAST(:workflow_version AS bigint) IS NULL OR i.workflow_version = :workflow_version)
  AND (CAST(:status AS text) IS NULL OR i.status = :status)
  AND (CAST(:key_prefix AS text) IS NULL
       OR left(i.business_key, length(CAST(:key_prefix AS text))) = :key_prefix)
  AND (CAST(:flagged AS integer) IS NULL OR CAST(:flagged AS integer) = CASE WHEN EXISTS (
      SELECT 1 FROM lf_attention a WHERE a.instance_id = i.instance_id AND a.cleared_at IS NULL)
      THEN 1 ELSE 0 END)
  AND (CAST(:reason_code AS text) IS NULL OR i.reason_code = :reason_code)
  AND (CAST(:created_from AS double precision) IS NULL OR i.created_at >= :created_from)
  AND (CAST(:created_until AS double precision) IS NULL OR i.created_at < :created_until)
  AND (CAST(:after_at AS double precision) IS NULL OR i.created_at < :after_at
       OR (i.created_at = :after_at AND i.instance_id < CAST(:after_id AS text)))
ORDER BY i.created_at DESC, i.instance_id DESC
LIMIT :limit;

-- name: count_versions
-- What the journal holds of each definition: instances per workflow, version, fingerprint and
-- status (of one tenant, or of all).
SELECT workflow_name, workflow_version, fingerprint, status, count(*) AS instances,
       min(created_at) AS first_created_at, max(created_at) AS last_created_at
FROM lf_instances
WHERE (CAST(:tenant AS text) IS NULL OR tenant = :tenant)
GROUP BY workflow_name, workflow_version, fingerprint, status
ORDER BY workflow_name, workflow_version DESC, fingerprint, status;

-- name: note_children_cancelled
-- The timeline's entry of each child cancel_children asks, sent just before it (same rows).
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT instance_id, CAST(:now AS double precision), generation, 'cancel', NULL, 'requested',
       'its parent ' || CAST(:instance_id AS text) || ' ended ' || CAST(:status AS text)
FROM lf_instances
WHERE parent_instance_id = :instance_id AND on_parent_end = 'cancel' AND cancel_requested_at IS NULL
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED',
                     'FORWARD_RECOVERY_REQUIRED', 'MANUAL_INTERVENTION');

-- name: cancel_children
-- A parent that ends for good asks each live child started with on_parent_end 'cancel' to
-- cancel, in its ending's transaction (through the parent index): as request_cancel does, the
-- first request stands, a suspended child is due now and the request counts as an arrival.
UPDATE lf_instances
SET cancel_requested_at = CAST(:now AS double precision),
    cancel_reason = 'its parent ' || CAST(:instance_id AS text) || ' ended ' || CAST(:status AS text),
    cancel_compensate = 1,
    available_at = LEAST(available_at, :now),
    arrived_since_claim = 1
WHERE parent_instance_id = :instance_id AND on_parent_end = 'cancel' AND cancel_requested_at IS NULL
  AND status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED',
                     'FORWARD_RECOVERY_REQUIRED', 'MANUAL_INTERVENTION');
