-- Ledgerflow schema 0005: concurrency limits shared by every worker.
--
-- A scope is 'workflow:<name>' or 'tenant:<tenant>'; at most in_flight_max instances of it are
-- owned (claimed, lease alive) at once, whichever worker owns them. Waiting instances hold no
-- slot: they are not owned.

CREATE TABLE lf_limits (
    scope         TEXT PRIMARY KEY,
    in_flight_max INTEGER NOT NULL CHECK (in_flight_max >= 0)
);
