-- Steps: the journal. One row per (instance, run, seq); every change names the status it
-- replaces.

-- name: insert_step
INSERT INTO lf_steps (
    instance_id, run, seq, kind, name, command_id, status, attempt, input, output, error,
    retry_policy, next_attempt_at, generation, updated_at
) VALUES (
    :instance_id, :run, :seq, :kind, :name, :command_id, :status, :attempt, :input, :output,
    :error, :retry_policy, :next_attempt_at, :generation, :now
);

-- name: update_step
UPDATE lf_steps
SET status = :status, attempt = :attempt, output = :output, error = :error,
    next_attempt_at = :next_attempt_at, generation = :generation, updated_at = :now
WHERE instance_id = :instance_id AND run = :run AND seq = :seq AND status = :expected;

-- name: select_steps
-- The steps of many instances' runs (keys as a JSON array of [id, run]): recovered
-- instances replay together.
SELECT * FROM lf_steps WHERE (instance_id, run) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys)
)
ORDER BY instance_id, run, seq;

-- name: select_step
SELECT * FROM lf_steps WHERE instance_id = :instance_id AND run = :run AND seq = :seq;
