-- The perimeter: API tokens, console sessions and the answers an Idempotency-Key replays.

-- name: live_token_named
-- A name is one principal: at most one live (not revoked) token acts under it.
SELECT * FROM lf_api_tokens WHERE name = :name AND revoked_at IS NULL LIMIT 1;

-- name: insert_token
INSERT INTO lf_api_tokens (token_id, name, role, tenant, secret_hash, created_at, created_by)
VALUES (:token_id, :name, :role, :tenant, :secret_hash, :created_at, :created_by);

-- name: get_token
SELECT * FROM lf_api_tokens WHERE token_id = :token_id;

-- name: select_tokens
-- Oldest first; revoked ones too (they explain the names in the audit log).
SELECT * FROM lf_api_tokens ORDER BY created_at, token_id;

-- name: revoke_token
UPDATE lf_api_tokens SET revoked_at = :now, revoked_by = :revoked_by
WHERE token_id = :token_id AND revoked_at IS NULL;

-- name: end_token_sessions
-- A revoked token signs nobody in any more: its console sessions end with it.
DELETE FROM lf_console_sessions WHERE token_id = :token_id;

-- name: insert_session
INSERT INTO lf_console_sessions (session_hash, token_id, csrf_token, created_at, expires_at)
VALUES (:session_hash, :token_id, :csrf_token, :created_at, :expires_at);

-- name: get_session
-- A session that has not expired.
SELECT * FROM lf_console_sessions WHERE session_hash = :session_hash AND expires_at > :now;

-- name: delete_session
DELETE FROM lf_console_sessions WHERE session_hash = :session_hash;

-- name: purge_sessions
-- Expired sessions, a bounded number at a time (each sign-in sweeps some).
DELETE FROM lf_console_sessions WHERE session_hash IN (
    SELECT session_hash FROM lf_console_sessions WHERE expires_at <= :now LIMIT :limit
);

-- name: purge_idempotency
-- Answers past their retention, a bounded number at a time (each new key sweeps some).
DELETE FROM lf_idempotency WHERE (scope, idempotency_key) IN (
    SELECT scope, idempotency_key FROM lf_idempotency WHERE created_at < :cutoff LIMIT :limit
);

-- name: reserve_idempotency
-- Claim a key for a request about to be answered; nothing when the key is taken.
INSERT INTO lf_idempotency (scope, idempotency_key, request_hash, status, body, created_at)
VALUES (:scope, :idempotency_key, :request_hash, 0, '', :now)
ON CONFLICT DO NOTHING;

-- name: get_idempotency
SELECT * FROM lf_idempotency WHERE scope = :scope AND idempotency_key = :idempotency_key;

-- name: take_over_idempotency
-- A claim whose request never finished (the server died while answering it), claimed before
-- :abandoned_before, is claimed again by a retry of the same request: once, conditional on
-- the claim time it read (created_at is the time of the claim that holds the key).
UPDATE lf_idempotency SET created_at = :now
WHERE scope = :scope AND idempotency_key = :idempotency_key AND request_hash = :request_hash
  AND status = 0 AND created_at = :claimed_at AND created_at < :abandoned_before;

-- name: finish_idempotency
-- Only by the claim that holds the key: a request whose claim was taken over keeps nothing.
UPDATE lf_idempotency SET status = :status, body = :body
WHERE scope = :scope AND idempotency_key = :idempotency_key AND status = 0
  AND created_at = :claimed_at;

-- name: release_idempotency
-- A request that could not be answered (a server error) leaves its key free for a retry.
DELETE FROM lf_idempotency
WHERE scope = :scope AND idempotency_key = :idempotency_key AND status = 0
  AND created_at = :claimed_at;
