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

-- name: insert_audit
INSERT INTO lf_audit (
    at, actor, role, kind, instance_id, target, fingerprint, outcome, reason, evidence, plan,
    refusal, generation_before, generation_after
) VALUES (
    :now, :actor, :role, :kind, :instance_id, :target, :fingerprint, :outcome, :reason,
    :evidence, :plan, :refusal, :generation_before, :generation_after
)
RETURNING audit_id;

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

-- name: last_applied_audit
-- The latest applied repair with this fingerprint: a repeat of it may be a no-op.
SELECT * FROM lf_audit
WHERE fingerprint = :fingerprint AND outcome = 'applied'
ORDER BY audit_id DESC
LIMIT 1;

-- name: repin_instance
-- An upgrade or a migration pins the instance to another definition: only if it is still
-- pinned to the one the replay proved against, under the repair's generation.
UPDATE lf_instances
SET workflow_version = :version, fingerprint = :fingerprint, updated_at = :now
WHERE instance_id = :instance_id AND generation = :generation
  AND workflow_version = :expected_version AND fingerprint = :expected_fingerprint;

-- name: move_step
-- A migration moves a journal position (in two passes, through :offset, so that positions
-- may trade places). The step keeps its command id.
UPDATE lf_steps SET seq = :to_seq
WHERE instance_id = :instance_id AND run = :run AND seq = :from_seq;

-- name: move_effect
-- The effect at a moved position goes with it, written with the id and key it is given (its
-- original ones: a key is never minted again).
UPDATE lf_effects
SET seq = :to_seq, effect_id = :effect_id, idempotency_key = :idempotency_key
WHERE instance_id = :instance_id AND run = :run AND seq = :from_seq;
