-- Steps: the journal. One row per (instance, run, seq); every change names the status it
-- replaces.

-- name: insert_step
INSERT INTO lf_steps (
    instance_id, run, seq, kind, name, command_id, status, attempt, input, output, error,
    error_traceback, attempt_errors, retry_policy, next_attempt_at, generation, updated_at
) VALUES (
    :instance_id, :run, :seq, :kind, :name, :command_id, :status, :attempt, :input, :output,
    :error, :error_traceback, :attempt_errors, :retry_policy, :next_attempt_at, :generation, :now
);

-- name: update_step
UPDATE lf_steps
SET status = :status, attempt = :attempt, output = :output, error = :error,
    error_traceback = :error_traceback, attempt_errors = :attempt_errors, next_attempt_at = :next_attempt_at, generation = :generation, updated_at = :now
WHERE instance_id = :instance_id AND run = :run AND seq = :seq AND status = :expected;

-- name: select_step
SELECT * FROM lf_steps WHERE instance_id = :instance_id AND run = :run AND seq = :seq;
