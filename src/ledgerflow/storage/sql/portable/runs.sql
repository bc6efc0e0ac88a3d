-- Runs: run N closes and run N+1 opens, in the owner's commit (ctx.continue_as_new).

-- name: count_unsettled_run_effects
-- Effects of the closing run not settled yet (planned, intended, dispatched or in doubt): the
-- switch is refused while there is one, so no outcome is left to a run nobody replays.
SELECT count(*) AS n FROM lf_effects
WHERE instance_id = :instance_id AND run = :run
  AND state IN ('PLANNED', 'INTENDED', 'ACCEPTED', 'UNKNOWN');

-- name: close_run
-- The closing run's row of history: its input and how many steps it journaled. Conditional
-- on the instance still being on that run and running: a run closes once.
INSERT INTO lf_runs (instance_id, run, input, steps, generation, closed_at)
SELECT i.instance_id, i.run, coalesce(i.run_input, i.input),
       (SELECT count(*) FROM lf_steps s WHERE s.instance_id = i.instance_id AND s.run = i.run),
       :generation, :now
FROM lf_instances i
WHERE i.instance_id = :instance_id AND i.run = :run AND i.status = 'RUNNING';

-- name: open_next_run
-- The instance moves to the next run with that run's own input; its start input stays.
UPDATE lf_instances
SET run = run + 1, run_input = :input, updated_at = :now
WHERE instance_id = :instance_id AND run = :run AND generation = :generation
  AND status = 'RUNNING';

-- name: move_pending_events
-- Every event no wait has taken goes to the new run, in the switch's transaction.
UPDATE lf_inbox SET run = :next_run
WHERE instance_id = :instance_id AND state = 'PENDING';

-- name: select_runs
-- The latest :limit closed runs of an instance, oldest first (the open one is the instance's
-- own run).
SELECT * FROM (
    SELECT * FROM lf_runs WHERE instance_id = :instance_id ORDER BY run DESC LIMIT :limit
) AS latest
ORDER BY run;
