-- Durable locks: what PostgreSQL writes its own way.

-- name: serialise_lock
-- A transaction lock on the lock's name, held until the transaction ends: a grant, a release
-- (with its hand-over) and a queueing of one lock take their turns, so a waiter queued while
-- the holder releases is either seen by the release or sees the lock free, never neither.
SELECT 1 AS held
FROM (SELECT pg_advisory_xact_lock(
    hashtextextended(CAST(:tenant AS text) || chr(31) || CAST(:name AS text), 27)
)) AS taken;
