-- Writes inside a caller's own transaction (engine.within): the journal's marker, read through
-- the caller's connection and compared with the store's own, and the savepoint every call of
-- the engine makes there, so that a refused write leaves the caller's transaction usable.

-- name: select_journal_marker
-- The journal's identity: the instant its first migration was applied, and that migration's
-- checksum. Read through the store's connection and through the caller's; a caller connected
-- to any other journal (or to no journal at all) reads another marker, or none.
SELECT applied_at, checksum FROM lf_schema_migrations WHERE version = 1;

-- name: within_savepoint
-- Each call of the engine inside the caller's transaction, all or nothing; nested calls nest
-- (RELEASE and ROLLBACK TO name the newest savepoint of this name).
SAVEPOINT lf_within;

-- name: within_release
RELEASE SAVEPOINT lf_within;

-- name: within_rollback
-- A refused write leaves nothing of itself, and the caller's transaction usable again.
ROLLBACK TO SAVEPOINT lf_within;

-- name: audit_visible
-- Whether an audit record is visible here: read through the store's own connection, the record
-- of a write made inside a caller's transaction is visible exactly when that transaction
-- committed.
-- The fingerprint is the caller's transaction's own (a rolled-back SQLite insert may hand
-- its id to another record).
SELECT audit_id FROM lf_audit WHERE audit_id = :audit_id AND fingerprint = :fingerprint;
