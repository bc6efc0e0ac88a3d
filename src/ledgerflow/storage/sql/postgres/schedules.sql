-- Schedules, PostgreSQL's own: the database's clock.

-- name: database_now
-- The time a tick decides by: the database's, so that workers whose clocks disagree decide
-- the same slots due.
SELECT CAST(extract(epoch FROM clock_timestamp()) AS double precision) AS now;
