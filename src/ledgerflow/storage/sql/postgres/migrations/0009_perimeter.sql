-- Ledgerflow schema 0009: the perimeter — who may call the HTTP API and the console, the answers
-- an Idempotency-Key replays, and the console's sign-in sessions.

-- An API token: a high-entropy secret shown once at creation and kept only as its SHA-256;
-- token_id is the public lookup prefix written in front of the secret (lft_<id>_<secret>), so
-- a request finds its row by id and compares hashes, never by scanning secrets. A token acts as
-- the principal `name`, with one role, inside one tenant ('*' only for an admin: every tenant).
-- A revoked token is kept (with who revoked it and when) so that the audit log's names stay
-- explainable.
CREATE TABLE lf_api_tokens (
    token_id      TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('viewer', 'signaller', 'operator', 'admin')),
    tenant        TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at    DOUBLE PRECISION NOT NULL,
    created_by    TEXT NOT NULL,
    revoked_at    DOUBLE PRECISION,
    revoked_by    TEXT
);

-- The first answer to a POST sent with an Idempotency-Key, per token (scope): a retry with the
-- same key and the same request gets it again; another request under the same key is refused.
-- status 0 marks a request still being answered. Rows older than the retention bound are
-- purged as new ones arrive (lf_idempotency_created finds them).
CREATE TABLE lf_idempotency (
    scope           TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    status          INTEGER NOT NULL,
    body            TEXT NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);

CREATE INDEX lf_idempotency_created ON lf_idempotency (created_at);

-- A console sign-in: the cookie holds a random secret, the journal its SHA-256, the token it
-- signed in with (revoking the token ends its sessions) and the CSRF token its forms carry.
CREATE TABLE lf_console_sessions (
    session_hash TEXT PRIMARY KEY,
    token_id       TEXT NOT NULL REFERENCES lf_api_tokens (token_id),
    csrf_token     TEXT NOT NULL,
    created_at     DOUBLE PRECISION NOT NULL,
    expires_at     DOUBLE PRECISION NOT NULL
);

-- The instance list pages by (created_at, instance_id), newest first.
CREATE INDEX lf_instances_created ON lf_instances (created_at, instance_id);
