-- Schedules, SQLite's own: the database's clock.

-- name: database_now
-- The time a tick decides by: the database's, so that workers whose clocks disagree decide
-- the same slots due (SQLite: the one machine's clock, to the millisecond).
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;
