-- Durable locks: what SQLite writes its own way.

-- name: serialise_lock
-- Nothing to take here: SQLite's BEGIN IMMEDIATE already holds the one write lock, so a grant,
-- a release and a queueing of one lock never interleave (PostgreSQL takes a lock per name).
SELECT 1 AS held WHERE :name IS NOT NULL OR :tenant IS NOT NULL OR 1 = 1;
