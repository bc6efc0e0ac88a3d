-- Starts under a used business key (start options, see model/start_policy.py).

-- name: close_ended_run
-- The ended run's row of history, as a run that continued as new leaves one (runs.sql
-- close_run), with how it ended: sent once start_new_run moved the instance past it, with the
-- ended run's values as the start read them under the same condition.
INSERT INTO lf_runs (instance_id, run, input, steps, generation, closed_at, ended)
SELECT :instance_id, CAST(:run AS bigint), :ended_input,
       (SELECT count(*) FROM lf_steps s
        WHERE s.instance_id = :instance_id AND s.run = CAST(:run AS bigint)),
       CAST(:ended_generation AS bigint), :now, :ended;

-- name: start_new_run
-- The next run of an instance that has ended for good (if_ended='new_run' or
-- 'new_run_if_failed'): the same instance and business key, run + 1, the new start's input and
-- definition, unowned and due at its start time, everything of the ended run's ending cleared.
-- The ended run's journal (steps, effects of run N) stays as it was: every key derived from a
-- run names it, so run N + 1's keys are disjoint. The generation only grows (no write of run N
-- can pass a fence of run N + 1). Conditional on the run and ending read by the start: a
-- start that raced it here changes nothing (zero rows) and reads the instance again. Nothing
-- changes for a retired version, as for a new instance.
UPDATE lf_instances
SET run = run + 1, first_run = run + 1, status = :status, owner = NULL, lease_expires_at = NULL,
    available_at = :available_at, input = :input, run_input = NULL,
    workflow_version = CAST(:workflow_version AS bigint), fingerprint = :fingerprint,
    result = NULL, reason_code = :reason_code, reason = :reason, cause = NULL,
    cancel_requested_at = NULL, cancel_reason = NULL, cancel_compensate = NULL,
    cancel_outcome = NULL, lease_expiries = 0, arrived_since_claim = 0, trace_context = NULL,
    updated_at = :now
WHERE instance_id = :instance_id AND run = CAST(:run AS bigint) AND status = :ended
  AND NOT EXISTS (
    SELECT 1 FROM lf_retired_versions
    WHERE workflow_name = :workflow_name AND workflow_version = CAST(:workflow_version AS bigint)
)
RETURNING *;

-- name: start_now
-- A SCHEDULED instance's delay ends (a signal-with-start asked to wake it): due now, with the
-- timeline's word for it. Any other instance is left as it is (zero rows).
UPDATE lf_instances
SET available_at = CAST(:now AS double precision), reason = 'woken by a signal-with-start',
    arrived_since_claim = 1
WHERE instance_id = :instance_id AND status = 'SCHEDULED'
  AND available_at > CAST(:now AS double precision);

-- name: select_debounce_window
-- A pending debounced start's window, from its timeline (model/debounce.py): when its first
-- start opened it (the newest opening) and how many starts it holds (the newest entry's count).
SELECT (SELECT at FROM lf_timeline
        WHERE instance_id = :instance_id AND subject = 'debounce' AND from_state IS NULL
        ORDER BY entry_id DESC LIMIT 1) AS opened_at,
       (SELECT to_state FROM lf_timeline
        WHERE instance_id = :instance_id AND subject = 'debounce'
        ORDER BY entry_id DESC LIMIT 1) AS starts;

-- name: debounce_start
-- A debounced start collapses into its key's pending instance: the instance takes the start's
-- input and its moved due time. Only while it is SCHEDULED, debounced, not cancelled and never
-- claimed since (owner NULL): a worker that claimed it first read the input it runs, so a start
-- after that changes nothing here (zero rows) and is decided by the key's rules instead.
UPDATE lf_instances
SET input = :input, available_at = CAST(:available_at AS double precision), reason = :reason,
    updated_at = :now
WHERE instance_id = :instance_id AND run = CAST(:run AS bigint) AND status = 'SCHEDULED'
  AND owner IS NULL AND reason_code = 'debounced' AND cancel_requested_at IS NULL
RETURNING *;
