-- Schedules, SQLite's own: the database's clock.

-- name: database_now
-- The time a tick decides by: the database's, so that workers whose clocks disagree decide
-- the same slots due (SQLite: the one machine's clock, to the millisecond).
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: claim_schedules
-- A tick's batch, read as it is now: the tick's transaction began IMMEDIATE, so no other
-- worker's tick writes until it commits, and one that follows reads the cursors it moved.
SELECT * FROM lf_schedules
WHERE name IN (SELECT value FROM json_each(:names)) AND deleted = 0
ORDER BY name;

-- name: select_buffered_slots_of
-- The slots each of many schedules holds BUFFERED, oldest first.
SELECT name, nominal_at, spec_version FROM lf_schedule_slots
WHERE name IN (SELECT value FROM json_each(:names)) AND outcome = 'BUFFERED'
ORDER BY name, nominal_at;


-- name: lock_schedule
-- A trigger's: the write transaction began IMMEDIATE, no tick writes meanwhile.
SELECT name FROM lf_schedules WHERE name = :name;
