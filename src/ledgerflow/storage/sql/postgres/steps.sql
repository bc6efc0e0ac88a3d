-- Steps: the journal. One row per (instance, run, seq); every change names the status it
-- replaces.

-- name: insert_steps
-- Many new steps in one statement (a JSON array of objects shaped like insert_step's
-- parameters): the new steps of a whole group commit.
INSERT INTO lf_steps (
    instance_id, run, seq, kind, name, command_id, status, attempt, input, output,
    error, error_traceback, attempt_errors, retry_policy, next_attempt_at, generation, updated_at
)
SELECT s.instance_id, s.run, s.seq, s.kind, s.name, s.command_id, s.status, s.attempt, s.input,
       s.output, s.error, s.error_traceback, s.attempt_errors, s.retry_policy, s.next_attempt_at,
       s.generation, s.now
FROM jsonb_to_recordset(CAST(:steps AS jsonb)) AS s(
    instance_id text, run bigint, seq bigint, kind text, name text, command_id text,
    status text, attempt bigint, input text, output text, error text, error_traceback text,
    attempt_errors text,
    retry_policy text,
    next_attempt_at double precision, generation bigint, now double precision
);

-- name: select_steps
-- The steps of many instances' runs (keys as a JSON array of [id, run]): recovered
-- instances replay together.
SELECT * FROM lf_steps WHERE (instance_id, run) IN (
    SELECT k->>0, CAST(k->>1 AS bigint) FROM jsonb_array_elements(CAST(:keys AS jsonb)) AS k
)
ORDER BY instance_id, run, seq;
