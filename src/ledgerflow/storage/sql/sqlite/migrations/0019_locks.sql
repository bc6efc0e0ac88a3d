-- Ledgerflow schema 0019: durable named locks (ctx.lock).
--
-- A lock is named per tenant and held by one instance at most: the holder row's key is
-- (name, tenant), so two grants of one lock cannot both commit. A grant, a release and its
-- hand-over to the first waiter are each one transaction with the owner's fenced commit (or
-- with the ending, an operator's repair among them, that releases it).
CREATE TABLE lf_locks (
    name            TEXT NOT NULL,
    tenant          TEXT NOT NULL,
    holder_instance TEXT NOT NULL REFERENCES lf_instances (instance_id),
    holder_run      INTEGER NOT NULL,
    holder_seq      INTEGER NOT NULL,
    granted_at      REAL NOT NULL,
    PRIMARY KEY (name, tenant)
);
CREATE INDEX lf_locks_holder ON lf_locks (holder_instance);

-- The queue of each lock, first come first served: position is the order of enqueueing (one
-- counter for every queue), so a waiter is never overtaken by a later one.
CREATE TABLE lf_lock_waiters (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    instance_id TEXT NOT NULL REFERENCES lf_instances (instance_id),
    run         INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    enqueued_at REAL NOT NULL,
    UNIQUE (instance_id, run, seq)
);
CREATE INDEX lf_lock_waiters_queue ON lf_lock_waiters (name, tenant, position);
