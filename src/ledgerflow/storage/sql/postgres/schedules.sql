-- Schedules, PostgreSQL's own: the database's clock.

-- name: database_now
-- The time a tick decides by: the database's, so that workers whose clocks disagree decide
-- the same slots due.
SELECT CAST(extract(epoch FROM clock_timestamp()) AS double precision) AS now;

-- name: claim_schedules
-- A tick's batch, each row locked until the tick commits and read as it is now: a row another
-- worker's tick holds is skipped (that worker decides it), so racing workers split the
-- schedules instead of planning the same slots and rolling back.
SELECT * FROM lf_schedules
WHERE name IN (SELECT jsonb_array_elements_text(CAST(:names AS jsonb))) AND deleted = 0
ORDER BY name
FOR UPDATE SKIP LOCKED;

-- name: select_buffered_slots_of
-- The slots each of many schedules holds BUFFERED, oldest first.
SELECT name, nominal_at, spec_version FROM lf_schedule_slots
WHERE name IN (SELECT jsonb_array_elements_text(CAST(:names AS jsonb))) AND outcome = 'BUFFERED'
ORDER BY name, nominal_at;


-- name: lock_schedule
-- A trigger's: the schedule's row held first, so the statement after it reads the instance a
-- tick committed meanwhile.
SELECT name FROM lf_schedules WHERE name = :name FOR UPDATE;
