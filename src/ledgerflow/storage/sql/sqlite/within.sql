-- Writes inside a caller's own transaction (engine.within), SQLite's way.

-- name: select_database_identity
-- The files open on the connection: "main" must be the journal itself, and nothing may be
-- attached beside it (a transaction across attached WAL files commits atomically per file only).
SELECT name, file FROM pragma_database_list;

-- name: select_search_path
-- SQLite has no schemas: the journal's tables are the main file's (checked above).
SELECT NULL AS search_path;

-- name: set_search_path
SELECT :search_path AS search_path;
