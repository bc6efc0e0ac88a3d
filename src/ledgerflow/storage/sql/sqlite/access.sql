-- The perimeter: API tokens, console sessions and the answers an Idempotency-Key replays.

-- name: lock_tokens
-- SQLite's BEGIN IMMEDIATE already serialises writers: nothing more to lock.
SELECT 1;
