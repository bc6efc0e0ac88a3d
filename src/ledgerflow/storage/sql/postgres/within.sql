-- Writes inside a caller's own transaction (engine.within), PostgreSQL's way.

-- name: select_database_identity
-- The database the connection is to, and the cluster it lives in (the system identifier that
-- initdb chose): the marker read through it must be the store's, in the same database.
SELECT current_database() AS name, CAST(system_identifier AS text) AS file
FROM pg_control_system();

-- name: select_search_path
-- The caller's own search_path, put back after each call of the engine.
SELECT current_setting('search_path') AS search_path;

-- name: set_search_path
-- For the rest of this transaction only (never the session's): the journal's schema while the
-- engine writes, the caller's own path again after it.
SELECT set_config('search_path', :search_path, true) AS search_path;
