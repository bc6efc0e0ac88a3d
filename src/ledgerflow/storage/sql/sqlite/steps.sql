-- Steps: the journal. One row per (instance, run, seq); every change names the status it
-- replaces.

-- name: insert_steps
-- Many new steps in one statement (a JSON array of objects shaped like insert_step's
-- parameters): the new steps of a whole group commit.
INSERT INTO lf_steps (
    instance_id, run, seq, kind, name, command_id, status, attempt, input, output,
    error, error_traceback, attempt_errors, retry_policy, next_attempt_at, generation, updated_at
)
SELECT json_extract(value, '$.instance_id'), json_extract(value, '$.run'),
       json_extract(value, '$.seq'), json_extract(value, '$.kind'), json_extract(value, '$.name'),
       json_extract(value, '$.command_id'), json_extract(value, '$.status'),
       json_extract(value, '$.attempt'), json_extract(value, '$.input'),
       json_extract(value, '$.output'), json_extract(value, '$.error'),
       json_extract(value, '$.error_traceback'), json_extract(value, '$.attempt_errors'),
       json_extract(value, '$.retry_policy'), json_extract(value, '$.next_attempt_at'),
       json_extract(value, '$.generation'), json_extract(value, '$.now')
FROM json_each(:steps)
ORDER BY key;

-- name: select_steps
-- The steps of many instances' runs (keys as a JSON array of [id, run]): recovered
-- instances replay together.
SELECT * FROM lf_steps WHERE (instance_id, run) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:keys)
)
ORDER BY instance_id, run, seq;
