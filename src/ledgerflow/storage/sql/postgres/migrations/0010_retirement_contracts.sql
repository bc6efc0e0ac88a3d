-- Ledgerflow schema 0010: retired definition versions, and the participant contract version
-- each effect was recorded under.

-- A retired (workflow, version): no new instance may start pinned to it. Retiring is an
-- operator's command, written in one transaction with its audit record (audit_id), and only
-- while no instance that has not ended is pinned to that version (the evidence is in the audit
-- record). Starts are refused by the insert itself (insert_instance), so a start racing a
-- retirement either lands before it (and the retirement is refused) or is refused.
CREATE TABLE lf_retired_versions (
    workflow_name    TEXT NOT NULL,
    workflow_version BIGINT NOT NULL,
    retired_at       DOUBLE PRECISION NOT NULL,
    retired_by       TEXT NOT NULL,
    reason           TEXT NOT NULL,
    audit_id         BIGINT NOT NULL,
    PRIMARY KEY (workflow_name, workflow_version)
);

-- The participant contract (payload shape) version the effect's declaration carried when its
-- intent was written; NULL when the declaration named none.
ALTER TABLE lf_effects ADD COLUMN contract_version TEXT;
