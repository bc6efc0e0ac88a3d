-- Attention: what detection found (flags), the parking of poison work, and the reads behind the
-- operator's queue. A flag leaves the instance where it is; parking moves it to
-- MANUAL_INTERVENTION. Flags are never deleted: clearing one records who cleared it and why.

-- name: select_flags
-- Every flag of one instance, open and cleared, in the order they were raised.
SELECT * FROM lf_attention WHERE instance_id = :instance_id ORDER BY flag_id;

-- name: select_recent_claimers
-- Who claimed the instance most recently (the owners a crash loop went through), newest first.
SELECT to_state AS owner FROM lf_timeline
WHERE instance_id = :instance_id AND subject = 'owner' AND detail = 'claimed'
ORDER BY entry_id DESC
LIMIT :limit;

-- name: select_inflight_effects
-- Effects a crash-looping instance had sent (or was about to send) when its owners died.
SELECT effect_id, seq, attempt FROM lf_effects
WHERE instance_id = :instance_id AND run = :run AND state = 'INTENDED'
ORDER BY seq;

-- name: doubt_inflight_effect
-- Parked with a dispatch in flight: the participant may have applied it, so the ledger says
-- UNKNOWN (in doubt from this attempt), as recovery after any crash would, and a person sees it.
UPDATE lf_effects
SET state = 'UNKNOWN', doubt = attempt, reason = :reason, updated_at = :now
WHERE effect_id = :effect_id AND state = 'INTENDED';

-- name: defer_damaged_instance
-- A row that fails its invariants is not claimable; moving only its due time to "never" stops
-- every poll from reading it again. Nothing else of the row is touched: it is evidence.
UPDATE lf_instances SET available_at = :never WHERE instance_id = :instance_id;

-- name: redue_repaired_instance
-- A deferred row that reads cleanly again (someone repaired it) becomes due now.
UPDATE lf_instances SET available_at = :now
WHERE instance_id = :instance_id AND available_at >= :never;

-- name: scan_stuck_steps
-- Owned with a live (so renewed) lease, but no claim or commit since :cutoff, and no effect in
-- flight (a silent participant is its own reason). With the latest journaled step as evidence.
SELECT i.instance_id, i.status, i.owner, i.lease_expires_at, i.updated_at,
       s.seq AS step_seq, s.name AS step_name, s.status AS step_status, s.attempt AS step_attempt
FROM lf_instances i
LEFT JOIN lf_steps s
  ON s.instance_id = i.instance_id AND s.run = i.run
 AND s.seq = (SELECT max(m.seq) FROM lf_steps m WHERE m.instance_id = i.instance_id AND m.run = i.run)
WHERE i.status IN ('RUNNING', 'COMPENSATING', 'CANCELLING')
  AND i.owner IS NOT NULL AND i.lease_expires_at > :now
  AND i.updated_at <= :cutoff
  AND NOT EXISTS (
      SELECT 1 FROM lf_effects e
      WHERE e.instance_id = i.instance_id AND e.run = i.run AND e.state IN ('INTENDED', 'ACCEPTED'))
ORDER BY i.updated_at, i.instance_id
LIMIT :limit;

-- name: scan_stuck_unclaimed
-- Runnable and due since :cutoff, with no live lease.
SELECT instance_id, status, owner, lease_expires_at, available_at FROM lf_instances
WHERE status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND available_at <= :cutoff
  AND (owner IS NULL OR lease_expires_at <= :now)
ORDER BY available_at, instance_id
LIMIT :limit;

-- name: scan_silent_effects
-- Effects of live instances waiting for their participant since :cutoff: a dispatch in flight
-- (INTENDED, its owner alive) or an accepted asynchronous effect (ACCEPTED, awaiting callback).
SELECT e.instance_id, e.participant, e.operation, e.idempotency_key, e.attempt, e.state,
       e.updated_at
FROM lf_instances i
JOIN lf_effects e ON e.instance_id = i.instance_id AND e.run = i.run
WHERE i.status IN ('RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING')
  AND (e.state = 'ACCEPTED'
       OR (e.state = 'INTENDED' AND i.owner IS NOT NULL AND i.lease_expires_at > :now))
  AND e.updated_at <= :cutoff
  -- A callback waiting in the inbox is the participant's answer: not its silence.
  AND NOT EXISTS (
      SELECT 1 FROM lf_inbox b
      WHERE b.instance_id = e.instance_id AND b.state = 'PENDING'
        AND b.name = 'complete:' || e.effect_id)
ORDER BY e.updated_at, e.effect_id
LIMIT :limit;

-- name: scan_stuck_arrivals
-- Waiting instances not due before later (or never) that hold, since :cutoff, what would move
-- them on: an event an open wait of their run takes, the completion callback of an effect they
-- await, or a cancel request while parked at a wait or timer (reason 'waiting'; parked for a
-- callback, the effect in flight finishes first). Each is a lost wake-up.
SELECT i.instance_id, i.available_at, 'event' AS arrival, b.received_at AS arrived_at,
       b.name, b.event_id, s.seq
FROM lf_instances i
JOIN lf_inbox b ON b.instance_id = i.instance_id AND b.state = 'PENDING'
JOIN lf_steps s
  ON s.instance_id = i.instance_id AND s.run = i.run AND s.kind = 'wait'
 AND s.status = 'STARTED' AND s.name = 'wait:' || b.name
WHERE i.status = 'WAITING' AND i.available_at > :now AND b.received_at <= :cutoff
UNION ALL
SELECT i.instance_id, i.available_at, 'completion' AS arrival, b.received_at AS arrived_at,
       b.name, b.event_id, e.seq
FROM lf_instances i
JOIN lf_effects e ON e.instance_id = i.instance_id AND e.run = i.run AND e.state = 'ACCEPTED'
JOIN lf_inbox b
  ON b.instance_id = i.instance_id AND b.state = 'PENDING' AND b.name = 'complete:' || e.effect_id
WHERE i.status = 'WAITING' AND i.available_at > :now AND b.received_at <= :cutoff
UNION ALL
SELECT i.instance_id, i.available_at, 'cancel' AS arrival, i.cancel_requested_at AS arrived_at,
       NULL AS name, NULL AS event_id, NULL AS seq
FROM lf_instances i
WHERE i.status = 'WAITING' AND i.available_at > :now AND i.reason_code = 'waiting'
  AND i.cancel_requested_at <= :cutoff AND i.cancel_outcome IS NULL
ORDER BY arrived_at, instance_id
LIMIT :limit;

-- name: attention_effects
-- What a person must settle for one instance: effects in doubt and compensations that failed.
SELECT seq, participant, operation, idempotency_key, state, attempt, compensates, reason
FROM lf_effects
WHERE instance_id = :instance_id
  AND (state = 'UNKNOWN' OR (compensates IS NOT NULL AND state = 'FAILED'))
ORDER BY run, seq;
