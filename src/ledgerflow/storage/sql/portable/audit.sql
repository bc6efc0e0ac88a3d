-- Audit: the append-only log of operator repairs, and the fence a repair takes before it
-- writes. Nothing here updates or deletes an audit row.

-- name: insert_audit
INSERT INTO lf_audit (
    at, actor, role, kind, instance_id, target, fingerprint, outcome, reason, evidence, plan,
    refusal, generation_before, generation_after
) VALUES (
    :now, :actor, :role, :kind, :instance_id, :target, :fingerprint, :outcome, :reason,
    :evidence, :plan, :refusal, :generation_before, :generation_after
)
RETURNING audit_id;

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
-- The effect at a moved position goes with it, in the same two passes as its step, written
-- with the id and key it is given (its original ones: a key is never minted again).
UPDATE lf_effects
SET seq = :to_seq, effect_id = :effect_id, idempotency_key = :idempotency_key
WHERE instance_id = :instance_id AND run = :run AND seq = :from_seq;

-- name: remap_step_input
-- A migration maps an effect's payload from an old participant contract: the step's input
-- becomes what the new code sends, so that its replay is clean.
UPDATE lf_steps SET input = :input
WHERE instance_id = :instance_id AND run = :run AND seq = :seq AND kind = 'effect';

-- name: remap_effect_contract
-- ... and the effect is recorded under the new contract version; its payload (what the
-- participant took), id and key stay as they are.
UPDATE lf_effects SET contract_version = :contract_version
WHERE instance_id = :instance_id AND run = :run AND seq = :seq;
